"""The model side of the server: prompts, limits, and the jobs that run on the GPU.

:class:`Engine` owns the GGUF generator, the tokenizer, an optional sentence embedder and the
scheduler. With a :class:`~rlxpy.models.generate.BatchGenerator` (``rlxpy serve``'s default) requests
decode together in its slots (:class:`~rlxpy.serve.scheduler.BatchScheduler`), each with its own
temperature / top_k / top_p / seed; with a :class:`~rlxpy.models.generate.Generator` they run one at a
time through a :class:`~rlxpy.models.session.PrefixCache` with the sampler compiled into the graph.
Either way a request that starts like the previous one (the same system prompt, the same conversation
one turn longer) prefills only the rest. Everything here that raises for a bad request raises
:class:`ApiError` with the status and a message that says what to change.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlxpy.errors import InputError, RlxError
from rlxpy.models.generate import BatchGenerator, Sampling
from rlxpy.models.session import PrefixCache, TurnStats, stop_ids
from rlxpy.serve.protocol import ApiError, ChatCompletionRequest, CompletionRequest, GenerationRequest
from rlxpy.serve.scheduler import END, BatchScheduler, Generation, GenerationResult, Job, SerialScheduler

DEFAULT_EMBED_ID = "all-MiniLM-L6-v2"


@dataclass
class Finished:
    """How a generation ended, for the response's ``finish_reason`` and ``usage``."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    seconds: float


class StopStrings:
    """Cuts streamed text at the first of the request's ``stop`` strings, holding back a tail that
    could still become one."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [stop for stop in stops if stop]
        self.held = ""

    def push(self, text: str) -> tuple[str, bool]:
        """(text that is safe to send, whether a stop string was hit)."""
        if not self.stops:
            return text, False
        text = self.held + text
        hits = [index for index in (text.find(stop) for stop in self.stops) if index >= 0]
        if hits:
            self.held = ""
            return text[: min(hits)], True
        keep = 0
        for stop in self.stops:
            for length in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:length]):
                    keep = max(keep, length)
                    break
        self.held = text[len(text) - keep:] if keep else ""
        return text[: len(text) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


class Engine:
    """One GGUF chat model (and optionally one sentence-embedding model) behind a scheduler."""

    def __init__(self, generator: Any, tokenizer: Any, model_id: str, *, sampler: dict | None = None,
                 default_max_tokens: int | None = None, embed_dir: str | Path | None = None,
                 embed_id: str | None = None,
                 scheduler: SerialScheduler | BatchScheduler | None = None) -> None:
        self.generator = generator
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.batched = isinstance(generator, BatchGenerator)
        self.cache = PrefixCache(generator)
        self.stop = stop_ids(tokenizer)
        self.sampler = dict(sampler or {})
        self.seed = int(getattr(generator, "seed", 0))  # a request without "seed" samples with this one
        self.default_max_tokens = default_max_tokens
        self.embed_dir = embed_dir
        self.embed_id = embed_id if embed_dir is not None else None
        self._embedder: Any = None
        self.scheduler = scheduler or (BatchScheduler(generator) if self.batched else SerialScheduler())
        self.created = int(time.time())

    @classmethod
    def from_gguf(cls, path: str | Path, context: int = 2048, chunk: int | None = None,
                  sampler: dict | None = None, seed: int = 0, model_id: str | None = None,
                  embed: bool | str | Path = True, slots: int = 0, **kwargs: Any) -> Engine:
        """Load the GGUF; ``slots`` > 0 decodes up to that many requests together (each slot holds
        ``context`` tokens), 0 one at a time; ``chunk``: prefill tokens per run (None: by device, see
        ``models.generate.default_chunk``). ``embed`` True serves all-MiniLM-L6-v2 (when its
        package is installed), a path serves that sentence-transformers directory, False no embeddings."""
        from rlxpy.frontends.gguf import load_generator
        from rlxpy.frontends.gguf_tokenizer import GgufTokenizer

        if slots > 0:
            sized = {"chunk": chunk} if chunk else {}  # else the batched decoder's own default
            generator: Any = BatchGenerator.from_gguf(str(path), slots, context=context, **sized)
            generator.seed = seed
        else:
            generator, _ = load_generator(path, context=context, chunk=chunk, sampler=sampler, seed=seed)
        embed_dir, embed_id = None, None
        if embed is True:
            from rlxpy.frontends.embed import default_model_dir

            try:
                embed_dir, embed_id = default_model_dir(), DEFAULT_EMBED_ID
            except RlxError:
                embed_dir = None  # no embedding package: /v1/embeddings answers 404 for every model
        elif embed:
            embed_dir = Path(embed)
            embed_id = embed_dir.name
        return cls(generator, GgufTokenizer.from_gguf(path), model_id or Path(path).stem, sampler=sampler,
                   embed_dir=embed_dir, embed_id=embed_id, **kwargs)

    # -- requests ----------------------------------------------------------------------------------

    @property
    def context(self) -> int:
        return int(self.generator.config.context)

    def models(self) -> list[dict[str, Any]]:
        ids = [self.model_id] + ([self.embed_id] if self.embed_id else [])
        return [{"id": name, "object": "model", "created": self.created, "owned_by": "rlxpy"} for name in ids]

    def check_model(self, name: str, embeddings: bool = False) -> None:
        wanted = self.embed_id if embeddings else self.model_id
        if name == wanted:
            return
        served = ", ".join(repr(model["id"]) for model in self.models())
        if name in (self.model_id, self.embed_id):
            kind = "embeddings" if embeddings else "completions"
            raise ApiError(400, f"model {name!r} does not serve {kind}; use {wanted!r}", "model",
                           "model_not_supported")
        raise ApiError(404, f"the model {name!r} does not exist here; this server serves {served}", "model",
                       "model_not_found")

    def check_sampling(self, request: GenerationRequest) -> Sampling | None:
        """The request's sampling settings (the server's for those it leaves out). Batched, any
        settings go; one at a time, the sampler is compiled into the graph and a request may only
        ask for the one the server has (returns None)."""
        if self.batched:
            return Sampling(
                temperature=float(self.sampler.get("temperature", 0.0) if request.temperature is None
                                  else request.temperature),
                top_k=int(self.sampler.get("top_k", 0) if request.top_k is None else request.top_k),
                top_p=float(self.sampler.get("top_p", 1.0) if request.top_p is None else request.top_p),
                seed=self.seed if request.seed is None else int(request.seed))
        temperature = float(self.sampler.get("temperature", 0.0))
        top_p = float(self.sampler.get("top_p", 1.0))
        top_k = int(self.sampler.get("top_k", 0))
        greedy = temperature <= 0
        setting = "greedy decoding (temperature 0)" if greedy else (
            f"temperature {temperature:g}, top_p {top_p:g}, top_k {top_k}")
        hint = f"; this server was started with {setting} (rlxpy serve --temperature/--top-p/--top-k)"
        if request.temperature is not None and not (
            (greedy and request.temperature == 0) or math.isclose(request.temperature, temperature)
        ):
            raise ApiError(400, f"temperature {request.temperature:g} is not available{hint}", "temperature")
        if request.top_p is not None and not greedy and not math.isclose(request.top_p, top_p):
            raise ApiError(400, f"top_p {request.top_p:g} is not available{hint}", "top_p")
        if request.top_k is not None and not greedy and request.top_k != top_k:
            raise ApiError(400, f"top_k {request.top_k} is not available{hint}", "top_k")

    def chat_prompt(self, request: ChatCompletionRequest) -> list[int]:
        try:
            text = self.tokenizer.apply_chat_template(request.plain_messages(), add_generation_prompt=True)
        except InputError as error:
            raise ApiError(400, str(error), "messages") from None
        return self.tokenizer.encode(text, add_special=False)

    def completion_prompt(self, request: CompletionRequest) -> tuple[list[int], str]:
        """(token ids, the prompt's text for ``echo``)."""
        prompt = request.prompt_value()
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt), prompt
        vocab = self.tokenizer.vocab_size
        bad = [token for token in prompt if not 0 <= token < vocab]
        if bad:
            raise ApiError(400, f"'prompt' holds token ids outside the vocabulary of {vocab}: {bad[:5]}",
                           "prompt")
        return list(prompt), self.tokenizer.decode(prompt)

    def budget(self, prompt_tokens: int, max_tokens: int | None, param: str = "max_tokens") -> int:
        """How many tokens the reply may have, or ApiError when prompt and limit do not fit."""
        context = self.context
        if prompt_tokens == 0:
            raise ApiError(400, "the prompt is empty", "prompt")
        if max_tokens is not None and max_tokens >= context:
            raise ApiError(400, f"{param}={max_tokens} is beyond the context of {context} tokens "
                                f"(ask for at most {context - 1})", param, "context_length_exceeded")
        if prompt_tokens >= context:
            raise ApiError(400, f"the prompt has {prompt_tokens} tokens, more than the context of {context} "
                                "tokens leaves room for (shorten it, or start the server with a larger "
                                "--context)", "messages", "context_length_exceeded")
        room = context - prompt_tokens
        if max_tokens is None:
            return min(room, self.default_max_tokens or room)
        if max_tokens > room:
            raise ApiError(400, f"the prompt ({prompt_tokens} tokens) and {param}={max_tokens} together "
                                f"exceed the context of {context} tokens (ask for at most {room})", param,
                           "context_length_exceeded")
        return max_tokens

    # -- jobs --------------------------------------------------------------------------------------

    def submit_generation(self, ids: list[int], max_tokens: int, seed: int | None = None,
                          sampling: Sampling | None = None) -> Job:
        """Queue a generation; its job emits ("text", piece) events, then ("done", Finished)."""
        if self.batched:
            return self._submit_batched(ids, max_tokens, sampling or Sampling(seed=self.seed))
        tokenizer, cache, stop = self.tokenizer, self.cache, self.stop

        def work(job: Job) -> None:
            cache.generator.seed = self.seed if seed is None else seed
            stats = TurnStats()
            decoder = tokenizer.stream(skip_special=True)
            completion = 0
            tokens = cache.generate(ids, max_tokens, stop, stats)
            try:
                for token in tokens:
                    if job.cancelled:
                        break
                    if token in stop:
                        continue
                    completion += 1
                    piece = decoder.push(token)
                    if piece:
                        job.emit("text", piece)
            finally:
                tokens.close()  # drains the decode steps in flight; the cache stays consistent
            tail = decoder.flush()
            if tail:
                job.emit("text", tail)
            job.emit("done", Finished(stats.finish_reason, stats.prompt_tokens, completion, stats.reused,
                                      stats.seconds))

        return self.scheduler.submit(work)

    def _submit_batched(self, ids: list[int], max_tokens: int, sampling: Sampling) -> Job:
        decoder = self.tokenizer.stream(skip_special=True)
        stop = set(self.stop)

        def on_token(job: Job, token: int) -> None:
            if token not in stop:
                piece = decoder.push(token)
                if piece:
                    job.emit("text", piece)

        def on_end(job: Job, result: GenerationResult) -> None:
            tail = decoder.flush()
            if tail:
                job.emit("text", tail)
            completion = sum(token not in stop for token in result.tokens)
            reason = "length" if result.finish_reason == "cancelled" else result.finish_reason
            job.emit("done", Finished(reason, result.prompt_tokens, completion, result.reused,
                                      result.seconds))

        request = Generation(list(ids), max_tokens, self.stop, sampling, on_token, on_end)
        return self.scheduler.submit_generation(request)  # type: ignore[union-attr]

    async def events(self, job: Job, stops: Sequence[str] = (), idle: float | None = None
                     ) -> AsyncIterator[tuple[str, Any]]:
        """A generation job's events as ("text", str), then one ("done", Finished); ("idle", None)
        every ``idle`` seconds without one (a chance to check the client). Leaving early cancels it."""
        matcher = StopStrings(stops)
        finished: Finished | None = None
        hit = False
        getter: asyncio.Future | None = None  # kept across idle timeouts: no event is ever dropped
        try:
            while True:
                if getter is None:
                    getter = asyncio.ensure_future(job.events.get())
                done, _ = await asyncio.wait({getter}, timeout=idle)
                if not done:
                    yield "idle", None
                    continue
                kind, value = getter.result()
                getter = None
                if kind == "text" and not hit:
                    text, hit = matcher.push(value)
                    if text:
                        yield "text", text
                    if hit:
                        job.cancel()  # the request has its answer: free the GPU
                elif kind == "done":
                    finished = value
                elif kind == "error":
                    raise _api_error(value)
                elif kind == END:
                    break
            if not hit:
                tail = matcher.flush()
                if tail:
                    yield "text", tail
            if finished is None:  # cancelled before it started
                raise ApiError(499, "the request was cancelled", code="cancelled")
            if hit:
                finished.finish_reason = "stop"
            yield "done", finished
        finally:
            if getter is not None:
                getter.cancel()
            job.cancel()  # a client that went away (a no-op once the job has ended)

    def submit_embeddings(self, sentences: list[str]) -> Job:
        """Queue an embedding job; it emits ("done", (vectors, token count))."""

        def work(job: Job) -> None:
            embedder = self.embedder()
            _, mask = embedder.tokenize(sentences)
            vectors = embedder.embed(sentences)
            job.emit("done", (vectors, int(mask.sum())))

        return self.scheduler.submit(work)

    async def result(self, job: Job) -> Any:
        """The value of a job's ("done", value) event."""
        value = None
        while True:
            kind, item = await job.events.get()
            if kind == "done":
                value = item
            elif kind == "error":
                raise _api_error(item)
            elif kind == END:
                return value

    def embedder(self) -> Any:
        """The sentence embedder, loaded (and compiled) on first use, on the worker thread."""
        if self._embedder is None:
            from rlxpy.frontends.embed import SentenceEmbedder

            self._embedder = SentenceEmbedder(self.embed_dir)
        return self._embedder

    def close(self) -> None:
        self.scheduler.close()


def _api_error(error: BaseException) -> ApiError:
    if isinstance(error, ApiError):
        return error
    if isinstance(error, InputError):
        return ApiError(400, str(error))
    return ApiError(500, f"{type(error).__name__}: {error}", kind="server_error")

"""Multi-turn chat over one KV cache.

:class:`PrefixCache` remembers which tokens the generator's KV cache holds; a new prompt that starts
with them prefills only what follows (a chat's next turn, a server request with the same system
prompt). Where the prompt departs from the cache (an edited history, a reply the template
re-tokenizes differently), prefill starts at the first differing token.

:class:`Session` keeps a conversation: each :meth:`Session.stream` renders the whole conversation
with the GGUF's chat template, prefills its new suffix and streams the reply as text.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlxpy.errors import InputError

#: Tokens that end a turn in the common chat formats (used where the vocabulary marks them control).
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>",
               "<|end_of_text|>", "</s>")


def stop_ids(tokenizer: Any) -> list[int]:
    """The tokens that end a reply: the file's EOS and the end-of-turn control tokens it has."""
    ids = [tokenizer.eos_id] if tokenizer.eos_id is not None else []
    for text in END_OF_TURN:
        index = tokenizer.token_id(text)
        if index is not None and tokenizer.is_special(index) and index not in ids:
            ids.append(index)
    return ids


@dataclass
class TurnStats:
    """What one generation cost: how much of the prompt came from the cache, what was prefilled."""

    prompt_tokens: int = 0  # the whole prompt (for a chat: the rendered conversation)
    reused: int = 0  # prompt tokens whose KV rows were already in the cache
    prefilled: int = 0  # prompt tokens run through prefill now (prompt_tokens - reused)
    tokens: list[int] = field(default_factory=list)  # generated token ids, a stop token included
    finish_reason: str = "length"  # "stop" (a stop token), "length" (max_tokens or the context)
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def generated(self) -> int:
        return len(self.tokens)


class PrefixCache:
    """A :class:`~rlxpy.models.generate.Generator` plus the token ids its KV cache holds."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        self.tokens: list[int] = []

    @property
    def context(self) -> int:
        return int(self.generator.config.context)

    def reset(self) -> None:
        """Forget the cache's contents (the next prompt is prefilled from position 0)."""
        self.tokens = []

    def reusable(self, ids: Sequence[int]) -> int:
        """How many leading tokens of ``ids`` the cache holds (at least one is always prefilled)."""
        limit = min(len(self.tokens), len(ids) - 1)
        count = 0
        while count < limit and self.tokens[count] == ids[count]:
            count += 1
        return count

    def generate(self, ids: Sequence[int], max_tokens: int, stop: Sequence[int] = (),
                 stats: TurnStats | None = None) -> Iterator[int]:
        """Yield up to ``max_tokens`` tokens after ``ids`` (a stop token is yielded, then ends it),
        prefilling only what the cache does not hold. ``stats`` is filled in as it goes."""
        ids = [int(token) for token in ids]
        if not ids:
            raise InputError("the prompt is empty: give at least one token")
        if len(ids) >= self.context:
            raise InputError(f"the prompt has {len(ids)} tokens; the context holds {self.context}")
        stats = stats if stats is not None else TurnStats()
        reuse = self.reusable(ids)
        stats.prompt_tokens, stats.reused, stats.prefilled = len(ids), reuse, len(ids) - reuse
        gen = self.generator
        self.tokens = ids[:reuse]  # what stays valid whatever happens below
        gen.position = reuse
        started = time.perf_counter()
        stop_set = set(stop)
        tokens = gen.generate(ids, max_tokens, stop, start=reuse)
        try:
            for token in tokens:
                stats.tokens.append(token)
                if token in stop_set:
                    stats.finish_reason = "stop"
                yield token
        finally:
            tokens.close()  # a caller that stopped early: the generator drains its steps in flight
            if gen.position >= len(ids):  # the prefill finished: rows [0, position) are known
                self.tokens = (ids + stats.tokens)[: gen.position]
            stats.prefill_seconds = gen.stats.prefill_seconds
            stats.decode_seconds = gen.stats.decode_seconds
            stats.seconds = time.perf_counter() - started


class Session:
    """A conversation with a GGUF chat model, its KV cache kept between turns.

    ``stream(text)`` yields the reply as text pieces while it is generated; ``send(text)`` returns it
    whole. ``turns`` holds a :class:`TurnStats` per turn (``turns[-1].prefilled`` is how many tokens
    the last turn ran through prefill). ``reset()`` starts a new conversation.
    """

    def __init__(self, generator: Any, tokenizer: Any, system: str | None = None, max_tokens: int = 256,
                 stop: Sequence[int] | None = None, cache: PrefixCache | None = None) -> None:
        self.tokenizer = tokenizer
        self.cache = cache if cache is not None else PrefixCache(generator)
        self.max_tokens = max_tokens
        self.stop = list(stop) if stop is not None else stop_ids(tokenizer)
        self.system = system
        self.messages: list[dict[str, Any]] = []
        self.turns: list[TurnStats] = []
        self.reset(system)

    def reset(self, system: str | None = None) -> None:
        """Start a new conversation (with ``system`` as its system prompt, if given). The KV cache
        keeps its rows: a new conversation that starts the same way still reuses them."""
        if system is not None:
            self.system = system
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.turns = []

    def prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """The token ids of ``messages`` rendered with the chat template, ready for the reply."""
        text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special=False)

    def stream(self, content: str, max_tokens: int | None = None, role: str = "user") -> Iterator[str]:
        """Add a message, then yield the reply's text as it is generated. The reply joins the
        conversation when the iterator ends (also when the caller stops it early: what was shown)."""
        messages = [*self.messages, {"role": role, "content": content}]
        ids = self.prompt_ids(messages)
        stats = TurnStats()
        decoder = self.tokenizer.stream(skip_special=True)
        reply: list[str] = []
        limit = self.max_tokens if max_tokens is None else max_tokens
        tokens = self.cache.generate(ids, limit, self.stop, stats)
        try:
            for token in tokens:
                if token in self.stop:
                    continue  # the last token: the generator ends the turn after it
                piece = decoder.push(token)
                if piece:
                    reply.append(piece)
                    yield piece
            tail = decoder.flush()
            if tail:
                reply.append(tail)
                yield tail
        finally:
            tokens.close()
            if stats.prompt_tokens:  # the prompt was accepted: the turn happened
                self.messages = [*messages, {"role": "assistant", "content": "".join(reply)}]
                self.turns.append(stats)

    def send(self, content: str, max_tokens: int | None = None) -> str:
        """Add a message and return the whole reply."""
        return "".join(self.stream(content, max_tokens))

    @property
    def last(self) -> TurnStats:
        if not self.turns:
            raise InputError("no turn yet")
        return self.turns[-1]

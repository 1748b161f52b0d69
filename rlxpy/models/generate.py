"""Text generation with a compiled transformer graph: chunked prefill, then one decode step per token.

:class:`Generator` decodes one sequence; :class:`BatchGenerator` decodes up to ``slots`` sequences
in one step (continuous batching: a sequence joins a free slot between steps and leaves when done),
each with its own sampling settings.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

import rlxpy
from rlxpy.errors import InputError, NumericsError
from rlxpy.models.transformer import TransformerConfig, build_batched_decoder, build_transformer
from rlxpy.wgpu_backend.debug import describe
from rlxpy.wgpu_backend.encode import STAGING_RING


def weight_cap() -> int:
    """Bytes a weight matrix may take in one block: 3/4 of the device's largest storage binding (the
    rest is for the GEMV's input and output, which share the binding)."""
    from rlxpy.wgpu_backend.device import get_device  # the device only once a Generator is built

    return get_device().max_binding * 3 // 4


#: Prefill tokens per run where the caller names none (``default_chunk``). On an H100 (SmolLM2, benches/
#: RESULTS.md, 2026-11-26) a 40 / 130 / 512-token prompt took 4.6 / 9.5 / 20 ms at 128 against 7.8 /
#: 20 / 69 at 32 (256: 6.0 / 6.1 / 12.6). A CPU adapter keeps 32: its kernels' cost grows with the
#: rows they are compiled for where the active extent does not shrink them.
GPU_CHUNK, CPU_CHUNK = 128, 32


def default_chunk() -> int:
    """The prefill chunk for this process's device (``GPU_CHUNK`` / ``CPU_CHUNK``; RLX_WGPU_KERNELS
    decides as it does for the kernels' variants)."""
    from rlxpy.wgpu_backend.device import get_device  # the device only once a Generator is built
    from rlxpy.wgpu_backend.executable import device_facts

    return CPU_CHUNK if device_facts(get_device()).cpu else GPU_CHUNK


def step_seed(seed: int, step: int) -> np.ndarray:
    """The u32[2] sampling seed of the token at position ``step`` of a generation seeded ``seed``."""
    mixed = (seed * 0x9E3779B1 + step) & 0xFFFFFFFFFFFFFFFF
    return np.array([mixed & 0xFFFFFFFF, mixed >> 32], np.uint32)


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    generated: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    compile_seconds: float = 0.0
    upload_seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)

    @property
    def prefill_tps(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tps(self) -> float:
        return self.generated / self.decode_seconds if self.decode_seconds else 0.0


class Generator:
    """Owns the compiled prefill+decode executable and the KV-cache position. From a GGUF file:
    ``rlxpy.frontends.gguf.load_generator``."""

    def __init__(self, config: TransformerConfig, chunk: int = 32, sampler: dict | None = None,
                 seed: int = 0) -> None:
        started = time.perf_counter()
        if not config.max_weight_bytes:  # split weights one storage binding cannot hold
            config = dataclasses.replace(config, max_weight_bytes=weight_cap())
        self.config = config
        self.chunk = chunk
        self.sampling = bool(sampler and sampler.get("temperature", 0) > 0)
        self.seed = seed
        self.graph = self._build(config, chunk, sampler)
        self.exe = rlxpy.compile(self.graph)
        self.stats = GenerationStats(compile_seconds=time.perf_counter() - started)
        #: called after each prefill chunk with (tokens done, tokens to do): a progress display
        self.progress: Callable[[int, int], None] | None = None
        #: decode steps in flight at once in ``generate`` (at most encode.STAGING_RING)
        self.depth = 4

    def _build(self, config: TransformerConfig, chunk: int, sampler: dict | None) -> rlxpy.Graph:
        return build_transformer(config, chunk, sampler)

    def _seed_input(self, prefix: str, step: int) -> dict[str, np.ndarray]:
        if not self.sampling:
            return {}
        return {f"{prefix}_seed": step_seed(self.seed, step)}

    def prefill(self, ids: Sequence[int], start: int = 0) -> int:
        """Run ``ids[start:]`` through the model at positions ``start, start + 1, ...``; returns the
        first new token. The KV cache must hold ``ids[:start]`` already (a conversation's earlier
        turns): only the new tokens are computed."""
        if not ids:
            raise InputError("the prompt is empty: give at least one token")
        if len(ids) >= self.config.context:
            raise InputError(f"prompt of {len(ids)} tokens does not fit the context of "
                             f"{self.config.context} tokens (use a shorter prompt or a larger --context)")
        if not 0 <= start < len(ids):
            raise InputError(f"prefill start {start} is not a position of the {len(ids)}-token prompt")
        started = time.perf_counter()
        token = 0
        begin = start
        while begin < len(ids):
            # A chunk never reaches past the cache: one near its end starts earlier, recomputing rows
            # the cache holds already (the same tokens at the same positions).
            begin = min(begin, max(0, self.config.context - self.chunk))
            part = list(ids[begin: begin + self.chunk])
            tokens = np.zeros(self.chunk, np.int32)
            tokens[: len(part)] = part
            out = self.exe.run({"prefill_tokens": tokens, "prefill_pos": np.array([begin], np.int32),
                                "prefill_last": np.array([len(part) - 1], np.int32),
                                **self._seed_input("prefill", begin)}, outputs=["prefill_next"])
            self._stop_on_nan("prefill", begin, self.chunk)
            token = int(out["prefill_next"].reshape(-1)[0])
            begin += len(part)
            if self.progress is not None:
                self.progress(begin - start, len(ids) - start)
        self.position = len(ids)
        self.stats.prompt_tokens = len(ids) - start
        self.stats.prefill_seconds = time.perf_counter() - started
        return token

    def decode(self, token: int) -> int:
        """Feed one token at the current position; returns the next token."""
        started = time.perf_counter()
        token = self._read(self._submit_decode(token))
        self._count_step(time.perf_counter() - started)
        return token

    def _submit_decode(self, token: int | None) -> Callable[[], dict[str, np.ndarray]]:
        """Submit one decode step at the current position without waiting. ``token=None`` takes the
        token from the previous step's ``decode_next`` on the GPU (no host round-trip)."""
        if self.position >= self.config.context:
            raise InputError(f"the KV cache is full ({self.config.context} tokens)")
        inputs = {"decode_pos": np.array([self.position], np.int32),
                  **self._seed_input("decode", self.position)}
        feeds = None
        if token is None:
            feeds = {"decode_tokens": self.exe.handle("decode_next")}
        else:
            inputs["decode_tokens"] = np.array([token], np.int32)
        pending = self.exe.submit(inputs, outputs=["decode_next"], feeds=feeds)
        self._stop_on_nan("decode", self.position, 1)  # under the flags the run is explained already
        self.position += 1
        return pending

    def _stop_on_nan(self, branch: str, start: int, rows: int) -> None:
        """RLX_WGPU_NAN_TRACE: a NaN/Inf in the last run ends the generation, naming where."""
        found = self.exe.last_nan if self.exe.flags.nan_trace else None
        if not found:
            return
        row = found["index"][0] if rows > 1 and found["shape"][:1] == [rows] else 0
        raise NumericsError(f"NaN trace: generation stopped at token position {start + row} ({branch} step): "
                            f"the first bad node is {describe(found)}")

    @staticmethod
    def _read(pending: Callable[[], dict[str, np.ndarray]]) -> int:
        return int(pending()["decode_next"].reshape(-1)[0])

    def _count_step(self, elapsed: float) -> None:
        self.stats.step_seconds.append(elapsed)
        self.stats.decode_seconds += elapsed
        self.stats.generated += 1

    def generate(self, ids: Sequence[int], max_tokens: int, stop: Sequence[int] = (),
                 start: int = 0) -> Iterator[int]:
        """Yield up to ``max_tokens`` new tokens, stopping after a token in ``stop``.

        Decode steps are pipelined ``depth`` deep: steps t+1 .. t+depth-1 are submitted (each
        token fed from the step before on the GPU) before step t is read back, so the GPU does not
        wait for the host's readback, streaming and stop check, nor for a host that stalls for a
        few steps. When a stop token ends the text, the steps already in flight are discarded
        (their KV rows lie past the new position, overwritten by the next steps).

        ``start`` > 0 prefills only ``ids[start:]`` over a KV cache that holds ``ids[:start]``. When
        the caller stops iterating early, the steps in flight are drained: afterwards the cache
        holds ``(ids + yielded tokens)[:position]`` in every case."""
        self.stats = GenerationStats(compile_seconds=self.stats.compile_seconds,
                                     upload_seconds=self.stats.upload_seconds)
        token = self.prefill(ids, start)
        if max_tokens <= 0:
            return
        yield token
        produced = 1
        if token in stop or produced == max_tokens or self.position >= self.config.context:
            return
        started = time.perf_counter()
        # the debug flags explain each run before the next; the readback ring bounds the depth
        depth = 1 if self.exe.flags.debug() else max(1, min(self.depth, STAGING_RING))
        in_flight: collections.deque = collections.deque()
        submitted, fed = produced, token  # tokens yielded or on their way; the host-fed token
        context = self.config.context
        try:
            while True:
                while len(in_flight) < depth and submitted < max_tokens and self.position < context:
                    in_flight.append(self._submit_decode(fed))  # None: fed from the step before
                    fed, submitted = None, submitted + 1
                if not in_flight:
                    return
                token = self._read(in_flight.popleft())
                now = time.perf_counter()
                self._count_step(now - started)
                started = now
                produced += 1
                yield token
                if token in stop:
                    self._discard(in_flight, keep=0)
                    return
        finally:  # a caller that stopped early: the step fed its last token stays in the cache
            self._discard(in_flight, keep=1)

    def _discard(self, in_flight: collections.deque, keep: int) -> None:
        """Finish the steps in flight (before anything else runs); all but the first ``keep`` leave
        the KV cache (the position moves back over their rows)."""
        self.position -= max(0, len(in_flight) - keep)  # first: a step that fails to finish raises
        while in_flight:
            in_flight.popleft()()

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits after the prompt (prefill from position 0), for comparisons with other runtimes."""
        last = None
        for start in range(0, len(ids), self.chunk):
            part = list(ids[start: start + self.chunk])
            tokens = np.zeros(self.chunk, np.int32)
            tokens[: len(part)] = part
            last = self.exe.run({"prefill_tokens": tokens, "prefill_pos": np.array([start], np.int32),
                                 "prefill_last": np.array([len(part) - 1], np.int32),
                                 **self._seed_input("prefill", start)}, outputs=["prefill_logits"])
        self.position = len(ids)
        return last["prefill_logits"].reshape(-1)  # type: ignore[index]


@dataclass(frozen=True)
class Sampling:
    """One request's token choice: temperature 0 is greedy (argmax); else softmax(logits / T), top-k
    (0 = off) and top-p filtering, a draw seeded by ``seed`` and the token's position."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def row(self) -> list[float]:
        return [max(float(self.temperature), 0.0), float(max(self.top_k, 0)), float(self.top_p)]


GREEDY = Sampling()


class BatchGenerator(Generator):
    """Decodes up to ``slots`` sequences together (continuous batching).

    Each slot owns a ``context``-row region of the KV caches. :meth:`admit` prefills a prompt
    (one sequence at a time, through the same prefill branch as :class:`Generator`, into its own
    caches; a prompt that starts like the last one prefills only the rest), copies those rows into
    a free slot and returns the first token; :meth:`step` runs one decode step for every active
    slot (one token each, at its own position, sampled with its own :class:`Sampling`);
    :meth:`release` frees a slot between steps. Greedy slots pick the tokens :class:`Generator`
    picks: the per-slot arithmetic is the one-sequence decode's, batched (see the tests)."""

    def __init__(self, config: TransformerConfig, slots: int, chunk: int = 32) -> None:
        self.slots = slots
        super().__init__(config, chunk)
        self.sampling = True  # prefill feeds its per-row settings through _seed_input
        self.positions = [0] * slots  # the next token's position (= KV rows held) per slot
        self.active = [False] * slots
        self.tokens = np.zeros(slots, np.int32)  # the token each active slot feeds next
        self.settings = [GREEDY] * slots
        self.scratch: list[int] = []  # the tokens the one-sequence caches hold (prefix reuse)
        self._admitting = GREEDY
        self._first_step = 0
        self.last_reused = 0  # prompt tokens the last admit found in the one-sequence caches
        self.steps = 0
        self._extent = slots  # rows the batch branch's scalable steps run (see _rows_for)
        self._in_flight = 0  # steps submitted and not read back (submit_step)
        self._last_read = 0.0
        self.scales = self._batch_extent()

    @classmethod
    def from_gguf(cls, path: str, slots: int, context: int = 2048, chunk: int = 32) -> BatchGenerator:
        """Load a GGUF decoder (any family ``load_gguf`` reads) into a batched generator."""
        from rlxpy.frontends.gguf import load_gguf, upload_weights

        model = load_gguf(path, context)
        gen = cls(model.config, slots, chunk)
        started = time.perf_counter()
        upload_weights(gen.exe, model)
        gen.stats.upload_seconds = time.perf_counter() - started
        return gen

    def _build(self, config: TransformerConfig, chunk: int, sampler: dict | None) -> rlxpy.Graph:
        return build_batched_decoder(config, self.slots, chunk)

    def _seed_input(self, prefix: str, step: int) -> dict[str, np.ndarray]:
        # the first token's seed: that of the last chunk of a prefill from position 0 (Generator's),
        # whatever part of the prompt the caches held already
        want = self._admitting
        return {"prefill_settings": np.array([want.row()], np.float32),
                "prefill_seeds": step_seed(want.seed, self._first_step)[None, :]}

    def _batch_extent(self) -> bool:
        """Whether the batch branch has steps that an active extent (the first k of ``slots`` rows)
        scales: then a step with few live slots skips the rows past the last live one (the steps
        that scale leave the live rows' arithmetic as it is). Other branches may have steps of
        ``slots`` rows too (a prefill chunk of that size): every other run resets the extent first."""
        exe = self.exe
        batch = exe.step_indices(["batch_next"])
        steps = exe.schedule.steps
        return self.slots > 1 and any(steps[i].kind == "gpu" and steps[i].scales
                                      and steps[i].extent_rows == self.slots for i in batch)

    def _rows_for(self, live: list[int] | None) -> None:
        """Run the batch branch over rows [0, last live slot] only; ``None``: every row (the extent
        every run but a decode step needs)."""
        rows = live[-1] + 1 if self.scales and live else self.slots
        if rows != self._extent:
            self.exe.set_active_extent(None if rows == self.slots else (rows, self.slots))
            self._extent = rows

    def prefill(self, ids: Sequence[int], start: int = 0) -> int:
        self._rows_for(None)
        return super().prefill(ids, start)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        self._rows_for(None)
        return super().logits(ids)

    def free_slots(self) -> list[int]:
        return [slot for slot in range(self.slots) if not self.active[slot]]

    @property
    def busy(self) -> int:
        return sum(self.active)

    def admit(self, ids: Sequence[int], sampling: Sampling = GREEDY,
              slot: int | None = None) -> tuple[int, int]:
        """Prefill ``ids`` and give the sequence a free slot: (slot, first new token). The slot then
        holds ``len(ids)`` KV rows and feeds the first token at the next :meth:`step`."""
        if self._in_flight:
            raise InputError("a decode step is in flight: read it back before admitting a sequence")
        free = self.free_slots()
        if slot is None:
            if not free:
                raise InputError(f"all {self.slots} decode slots are busy")
            slot = free[0]
        elif slot not in free:
            raise InputError(f"decode slot {slot} is not free (free: {free})")
        ids = [int(token) for token in ids]
        reuse = 0
        limit = min(len(self.scratch), len(ids) - 1)
        while reuse < limit and self.scratch[reuse] == ids[reuse]:
            reuse += 1
        self._admitting = sampling
        self._first_step = (len(ids) - 1) // self.chunk * self.chunk
        self.last_reused = reuse
        self.scratch = []  # unknown until the prefill finished
        first = self.prefill(ids, reuse)
        self.scratch = ids
        self.exe.run({"admit_pos": np.array([slot * self.config.context], np.int32)}, outputs=["admit_done"])
        self.positions[slot] = len(ids)
        self.tokens[slot] = first
        self.settings[slot] = sampling
        self.active[slot] = True
        return slot, first

    def release(self, slot: int) -> None:
        """Free ``slot``: its sequence leaves the batch (its cache rows are overwritten by the next)."""
        self.active[slot] = False
        self.positions[slot] = 0
        self.tokens[slot] = 0

    def room(self, slot: int) -> int:
        """How many more steps ``slot`` can take before its cache region is full."""
        return self.config.context - self.positions[slot]

    def step(self) -> dict[int, int]:
        """One decode step of every active slot: {slot: its next token}. Each slot's position
        advances by one; a slot whose cache region is full must be released first."""
        return self.submit_step()()

    def can_follow(self) -> bool:
        """Whether :meth:`submit_step` may queue the next step behind one in flight: every live slot
        has room for one more row, and no debug flag explains each run before the next."""
        live = [slot for slot in range(self.slots) if self.active[slot]]
        return (bool(live) and not self.exe.flags.debug()
                and all(self.positions[slot] < self.config.context for slot in live))

    def submit_step(self, follow: bool = False) -> Callable[[], dict[int, int]]:
        """Submit one decode step of every active slot without waiting; calling the result waits
        and returns {slot: next token} for the slots still active then (one released meanwhile
        has no token: its row was decoded in vain and is overwritten by the slot's next sequence).

        ``follow=True`` feeds each slot the token of the step still in flight, on the GPU, so the
        GPU decodes step t+1 while the host reads back and streams step t (what
        :meth:`Generator.generate` does for one sequence). Read each step before submitting the
        one after the next, and admit nothing while a step is in flight."""
        live = [slot for slot in range(self.slots) if self.active[slot]]
        if not live:
            return dict
        full = [slot for slot in live if self.positions[slot] >= self.config.context]
        if full:
            raise InputError(f"decode slots {full}: the KV cache region is full "
                             f"({self.config.context} tokens)")
        started = time.perf_counter()
        pos = np.zeros(self.slots, np.int32)  # free slots decode a dummy token at row 0 of their region
        seeds = np.zeros((self.slots, 2), np.uint32)
        settings = np.zeros((self.slots, 3), np.float32)
        for slot in live:
            pos[slot] = self.positions[slot]
            settings[slot] = self.settings[slot].row()
            seeds[slot] = step_seed(self.settings[slot].seed, self.positions[slot])
        inputs = {"batch_pos": pos, "batch_settings": settings, "batch_seeds": seeds}
        feeds = None
        if follow:
            feeds = {"batch_tokens": self.exe.handle("batch_next")}
        else:
            tokens = np.zeros(self.slots, np.int32)
            tokens[live] = self.tokens[live]
            inputs["batch_tokens"] = tokens
        self._rows_for(live)
        pending = self.exe.submit(inputs, outputs=["batch_next"], feeds=feeds)
        self._stop_on_nan("batch", int(pos[live[0]]), 1)
        for slot in live:
            self.positions[slot] += 1
        self._in_flight += 1

        def read() -> dict[int, int]:
            try:
                out = pending()["batch_next"].reshape(-1)
            finally:
                self._in_flight -= 1
            result = {}
            for slot in live:
                if self.active[slot]:
                    self.tokens[slot] = int(out[slot])
                    result[slot] = int(out[slot])
            self.steps += 1
            now = time.perf_counter()  # steps overlap when followed: count from the last read
            self._count_step(now - max(started, self._last_read))
            self._last_read = now
            return result

        return read

"""Text generation with a compiled transformer graph: chunked prefill, then one decode step per token."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

import rlxpy
from rlxpy.errors import InputError, NumericsError
from rlxpy.models.transformer import TransformerConfig, build_transformer
from rlxpy.wgpu_backend.debug import describe


def weight_cap() -> int:
    """Bytes a weight matrix may take in one block: 3/4 of the device's largest storage binding (the
    rest is for the GEMV's input and output, which share the binding)."""
    from rlxpy.wgpu_backend.device import get_device  # the device only once a Generator is built

    return get_device().max_binding * 3 // 4


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
        self.graph = build_transformer(config, chunk, sampler)
        self.exe = rlxpy.compile(self.graph)
        self.stats = GenerationStats(compile_seconds=time.perf_counter() - started)
        #: called after each prefill chunk with (tokens done, tokens to do): a progress display
        self.progress: Callable[[int, int], None] | None = None

    def _seed_input(self, prefix: str, step: int) -> dict[str, np.ndarray]:
        if not self.sampling:
            return {}
        mixed = (self.seed * 0x9E3779B1 + step) & 0xFFFFFFFFFFFFFFFF
        return {f"{prefix}_seed": np.array([mixed & 0xFFFFFFFF, mixed >> 32], np.uint32)}

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

        Decode steps are pipelined: step t+1 is submitted (its token fed from step t's output on the
        GPU) before step t is read back, so the GPU does not wait for the host's readback, streaming
        and stop check. When a stop token ends the text, the one step already in flight is
        discarded (its KV row lies past the new position, overwritten by the next step).

        ``start`` > 0 prefills only ``ids[start:]`` over a KV cache that holds ``ids[:start]``. When
        the caller stops iterating early, the step in flight is drained and kept: afterwards the
        cache holds ``(ids + yielded tokens)[:position]`` in every case."""
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
        pipelined = not self.exe.flags.debug()  # the debug flags explain each run before the next
        pending, following = self._submit_decode(token), None
        try:
            while True:
                more = produced + 1 < max_tokens and self.position < self.config.context
                following = self._submit_decode(None) if more and pipelined else None
                token, pending = self._read(pending), None
                now = time.perf_counter()
                self._count_step(now - started)
                started = now
                produced += 1
                yield token
                if not more:
                    return
                if token in stop:
                    if following is not None:
                        following, drain = None, following
                        drain()  # drain the step in flight before anything else runs
                        self.position -= 1
                    return
                pending, following = following if following is not None else self._submit_decode(None), None
        finally:
            for step in (pending, following):  # a caller that stopped early: finish what was submitted
                if step is not None:
                    step()

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

"""Sample family: token sampling from logits rows (temperature, top-k, top-p).

Documented in docs/ops.md#sample (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, TensorType, need


@dataclass(frozen=True)
class Sample(Op):
    """One token id (i32) per row of logits [..., V]: temperature, top-k, top-p, then Gumbel-max
    with Threefry2x32-20 keyed by ``seed``. An optional second input, a u32[2]
    (or i32[2]) tensor, overrides the seed per run. temperature 0 -> argmax (ties -> lowest index);
    temperature 1 with no filtering still samples (no greedy shortcut).

    ``per_row``: the settings come per row instead, from two more inputs: f32 [R, 3] rows of
    (temperature, top_k, top_p) and u32 (or i32) [R, 2] seeds, R = the rows of logits [R, V] (one
    request per row of a batched decode step). Row r is then sampled exactly as a one-row Sample
    with those attributes and seed input ``seeds[r]`` samples it (its Threefry counters do not
    depend on r); the attributes are unused."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    per_row: bool = False
    arity = (1, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x = ins[0]
        need(x.rank >= 1, "sample needs rank >= 1")
        if self.per_row:
            rows = x.shape[0] if x.rank == 2 else None
            need(rows is not None and len(ins) == 3, f"per-row sample needs logits [R, V] (got {x}), "
                 "settings f32[R, 3] and seeds u32[R, 2]")
            settings, seeds = ins[1], ins[2]
            need(settings.shape == (rows, 3) and settings.dtype == DType.F32,
                 f"per-row settings must be f32[{rows}, 3] (temperature, top_k, top_p), got {settings}")
            need(seeds.shape == (rows, 2) and seeds.dtype in (DType.U32, DType.I32),
                 f"per-row seeds must be u32[{rows}, 2], got {seeds}")
            return TensorType((rows,), DType.I32)
        need(len(ins) <= 2, f"sample takes logits and an optional seed, got {len(ins)} inputs")
        need(self.temperature >= 0 and 0 <= self.top_p <= 1 and self.top_k >= 0,
             f"temperature {self.temperature}, top_k {self.top_k}, top_p {self.top_p}")
        if len(ins) == 2:
            need(ins[1].shape == (2,), f"seed input must be [2], got {ins[1]}")
        return TensorType(tuple(x.shape[:-1]), DType.I32)

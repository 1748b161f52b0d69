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
    temperature 1 with no filtering still samples (no greedy shortcut)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    arity = (1, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x = ins[0]
        need(x.rank >= 1, "sample needs rank >= 1")
        need(self.temperature >= 0 and 0 <= self.top_p <= 1 and self.top_k >= 0,
             f"temperature {self.temperature}, top_k {self.top_k}, top_p {self.top_p}")
        if len(ins) == 2:
            need(ins[1].shape == (2,), f"seed input must be [2], got {ins[1]}")
        return TensorType(tuple(x.shape[:-1]), DType.I32)

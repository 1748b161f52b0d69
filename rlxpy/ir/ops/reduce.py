"""Reduce family: reductions, cumulative sum and selection.

Documented in docs/ops.md#reduce (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, ReduceOp, TensorType, check_axis, need
from rlxpy.ir.shape import Sym


@dataclass(frozen=True)
class Reduce(Op):
    """Sum/mean/max/min/prod over contiguous ``axes``; NaN propagates like torch."""

    op: ReduceOp
    axes: tuple[int, ...]
    keep_dim: bool = False

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        axes = sorted({check_axis(a, x.rank) for a in self.axes})
        need(bool(axes), "reduce needs at least one axis")
        need(axes == list(range(axes[0], axes[-1] + 1)), f"reduce axes {self.axes} must be contiguous")
        shape = [1 if i in axes else d for i, d in enumerate(x.shape) if self.keep_dim or i not in axes]
        return TensorType(tuple(shape), x.dtype)


@dataclass(frozen=True)
class Cumsum(Op):
    """Inclusive (or exclusive: y[0] = 0) prefix sum along ``axis``, like torch.cumsum."""

    axis: int = -1
    exclusive: bool = False

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        check_axis(self.axis, ins[0].rank)
        return ins[0]


@dataclass(frozen=True)
class TopK(Op):
    """Indices (i32) of the k largest along the last axis, descending; ties -> smaller index first
    (torch.topk(sorted=True) with a stable order). Requires k <= last dim."""

    k: int

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank >= 1, "topk needs rank >= 1")
        last = x.shape[-1]
        need(self.k >= 1 and (isinstance(last, Sym) or self.k <= last), f"k={self.k} for last dim {last}")
        return TensorType(tuple(x.shape[:-1]) + (self.k,), DType.I32)


@dataclass(frozen=True)
class Argmax(Op):
    """First index of the maximum along the last axis (i32); NaN counts as the maximum (torch)."""

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank >= 1, "argmax needs rank >= 1")
        return TensorType(tuple(x.shape[:-1]), DType.I32)

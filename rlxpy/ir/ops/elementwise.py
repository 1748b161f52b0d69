"""Element-wise family: casts, copies, activations, binary ops, comparisons, select.

Documented in docs/ops.md#elementwise (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.errors import GraphError
from rlxpy.ir.dtype import DType, promote
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp, Op, TensorType, need
from rlxpy.ir.shape import Shape, broadcast_shapes


def _broadcast(ins: Sequence[TensorType]) -> Shape:
    try:
        return broadcast_shapes(*(t.shape for t in ins))
    except ValueError as e:
        raise GraphError(str(e)) from None


@dataclass(frozen=True)
class Cast(Op):
    """Convert to ``to`` (same shape). Float -> int truncates toward zero and saturates at the
    target's range, NaN -> 0 (torch-like, never C's undefined behaviour). Int -> narrower int wraps
    (two's complement); float -> narrower float rounds to nearest even (beyond the range -> +-inf);
    -> bf16 rounds to nearest even (NaN stays NaN); -> bool is ``x != 0`` (NaN -> true); bool -> a
    number gives 0 or 1."""

    to: DType

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return TensorType(ins[0].shape, self.to)


@dataclass(frozen=True)
class Copy(Op):
    """An explicit copy into a fresh slot (same shape and dtype)."""

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return ins[0]


@dataclass(frozen=True)
class Activation(Op):
    """``fn(x)`` per element. GELU is the exact erf form, Round is half away
    from zero (like C's round(), unlike torch.round's half-to-even), NaN propagates."""

    fn: ActKind

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        need(ins[0].dtype.is_float, f"activation {self.fn.name} needs a float input, got {ins[0]}")
        return ins[0]


@dataclass(frozen=True)
class Binary(Op):
    """``a op b`` with numpy broadcasting. Pow is IEEE pow (C's pow; torch.pow with a tensor
    exponent): a negative base gives a real value for integral exponents, NaN otherwise (never a
    GPU's blanket NaN); (-inf) ** 0.5 = +inf (not sqrt's NaN). Integer Div truncates toward
    zero (torch.div(rounding_mode="trunc")); an integer x / 0 gives x."""

    op: BinaryOp
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return TensorType(_broadcast(ins), promote(ins[0].dtype, ins[1].dtype))


@dataclass(frozen=True)
class Compare(Op):
    """``a cmp b`` with broadcasting; bool result. NaN compares false except for NE."""

    op: CmpOp
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return TensorType(_broadcast(ins), DType.BOOL)


@dataclass(frozen=True)
class Where(Op):
    """``on_true if cond != 0 else on_false``, all three broadcast (like torch.where)."""

    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return TensorType(_broadcast(ins), promote(ins[1].dtype, ins[2].dtype))

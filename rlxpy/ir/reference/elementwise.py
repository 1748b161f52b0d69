"""Reference semantics of the element-wise family: activations, binary ops, comparisons, select,
casts and copies."""

from __future__ import annotations

import numpy as np
from scipy import special

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType, from_storage, to_storage
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp
from rlxpy.ir.reference.core import reference


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


ACTIVATIONS = {
    ActKind.RELU: lambda x: np.where(np.isnan(x), x, np.maximum(x, 0)),
    ActKind.SIGMOID: lambda x: special.expit(x),
    ActKind.TANH: np.tanh,
    ActKind.EXP: np.exp,
    ActKind.LOG: np.log,
    ActKind.SQRT: np.sqrt,
    ActKind.RSQRT: lambda x: 1.0 / np.sqrt(x),
    ActKind.NEG: np.negative,
    ActKind.ABS: np.abs,
    ActKind.GELU: lambda x: 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0))),
    ActKind.SILU: lambda x: x * special.expit(x),
    ActKind.GELU_APPROX: lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3))),
    ActKind.ROUND: _round_half_away,
    ActKind.SIN: np.sin,
    ActKind.COS: np.cos,
    ActKind.TAN: np.tan,
    ActKind.ATAN: np.arctan,
    ActKind.HARDSIGMOID: lambda x: np.where(np.isnan(x), x, np.clip(x + 3.0, 0.0, 6.0)) / 6.0,
    ActKind.HARDSWISH: lambda x: x * np.where(np.isnan(x), x, np.clip(x + 3.0, 0.0, 6.0)) / 6.0,
}


def apply_activation(fn: ActKind, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return ACTIVATIONS[fn](x.astype(np.float64)).astype(x.dtype)


@reference(ops.Activation)
def ref_activation(op: ops.Activation, args, node):
    return apply_activation(op.fn, args[0])


def _pow(a, b):
    # a full-size exponent: numpy's loop turns a stride-0 (broadcast) exponent of 0.5 into sqrt,
    # and sqrt(-inf) = NaN where IEEE pow (C's pow, torch.pow) gives +inf
    # (0-d operands count as stride 0 too, hence the flat 1-D copy)
    shape = np.broadcast_shapes(a.shape, b.shape)
    base = np.broadcast_to(a, shape).reshape(-1)
    exponent = np.broadcast_to(b, shape).reshape(-1).copy()
    if a.dtype.kind != "f" and np.any(exponent < 0):
        base = base.astype(np.float64)
    return np.power(base, exponent).reshape(shape)


BINARY = {
    BinaryOp.ADD: np.add, BinaryOp.SUB: np.subtract, BinaryOp.MUL: np.multiply,
    BinaryOp.MAX: np.maximum, BinaryOp.MIN: np.minimum, BinaryOp.POW: _pow,
}


@reference(ops.Binary)
def ref_binary(op: ops.Binary, args, node):
    dtype = node.dtype.numpy
    a, b = (x.astype(dtype) for x in args)
    with np.errstate(all="ignore"):
        if op.op is BinaryOp.DIV:
            if node.dtype.is_int:  # torch.div(rounding_mode="trunc"); x / 0 gives x
                safe = np.where(b == 0, 1, b).astype(dtype)
                # exact in integers (a float quotient loses i64 precision): floor, then round
                # toward zero where the remainder is nonzero and the signs differ
                quotient = np.floor_divide(a, safe)
                inexact = (a - quotient * safe != 0) & ((a < 0) != (safe < 0))
                return (quotient + inexact).astype(dtype)
            return a / b
        return BINARY[op.op](a, b)


COMPARE = {
    CmpOp.EQ: np.equal, CmpOp.NE: np.not_equal, CmpOp.LT: np.less,
    CmpOp.LE: np.less_equal, CmpOp.GT: np.greater, CmpOp.GE: np.greater_equal,
}


@reference(ops.Compare)
def ref_compare(op: ops.Compare, args, node):
    a, b = args
    return COMPARE[op.op](a, b)


@reference(ops.Where)
def ref_where(op, args, node):
    cond, on_true, on_false = args
    return np.where(cond != 0, on_true, on_false)


def cast_values(x: np.ndarray, to: DType) -> np.ndarray:
    """Float -> int truncates toward zero, saturates at the target's range, NaN -> 0."""
    if to.is_int and x.dtype.kind == "f":
        info = np.iinfo(to.numpy)
        whole = np.trunc(x.astype(np.float64))
        # compare in float64 before converting: float(i64 max) rounds up to 2**63, which a clip
        # would leave out of range (the conversion then wraps to i64 min)
        high, low = whole >= float(info.max), whole <= float(info.min)
        inside = np.where(np.isnan(whole) | high | low, 0.0, whole).astype(to.numpy)
        return np.where(high, info.max, np.where(low, info.min, inside)).astype(to.numpy)
    if to is DType.BOOL:
        return x != 0
    if to is DType.BF16:  # round to bf16 precision, keep f32 storage in the reference
        return from_storage(to_storage(x.astype(np.float32), DType.BF16), DType.BF16)
    return x.astype(to.numpy)


@reference(ops.Cast)
def ref_cast(op: ops.Cast, args, node):
    return cast_values(args[0], op.to)


@reference(ops.Copy)
def ref_copy(op, args, node):
    return args[0].copy()

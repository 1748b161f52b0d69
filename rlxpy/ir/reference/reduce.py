"""Reference semantics of the reduce family: reductions, cumulative sum, top-k and argmax."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.ops.base import ReduceOp
from rlxpy.ir.reference.core import reference
from rlxpy.ir.shape import normalize_axis

REDUCE = {ReduceOp.SUM: np.sum, ReduceOp.MEAN: np.mean, ReduceOp.MAX: np.max, ReduceOp.MIN: np.min,
          ReduceOp.PROD: np.prod}


@reference(ops.Reduce)
def ref_reduce(op: ops.Reduce, args, node):
    (x,) = args
    axes = tuple(sorted({normalize_axis(a, x.ndim) for a in op.axes}))
    if x.size == 0 and op.op in (ReduceOp.MAX, ReduceOp.MIN):
        raise ValueError("max/min over an empty axis")
    wide = x.astype(np.float64) if x.dtype.kind == "f" else x
    return REDUCE[op.op](wide, axis=axes, keepdims=op.keep_dim).astype(x.dtype)


@reference(ops.Cumsum)
def ref_cumsum(op: ops.Cumsum, args, node):
    x = args[0]
    axis = normalize_axis(op.axis, x.ndim)
    total = np.cumsum(x.astype(np.float64) if x.dtype.kind == "f" else x, axis=axis)
    if op.exclusive:
        # shift by one instead of subtracting x: inf - inf and NaN - NaN would poison y[i]
        leading = np.zeros_like(np.take(total, [0], axis=axis)) if x.shape[axis] else total
        total = np.concatenate([leading, np.take(total, range(x.shape[axis] - 1), axis=axis)], axis=axis)
    return total.astype(x.dtype)


@reference(ops.TopK)
def ref_topk(op: ops.TopK, args, node):
    (x,) = args
    # NaN first (torch.topk counts NaN as the largest), then by value descending; lexsort is
    # stable, so ties keep the smaller index first. NaN must outrank +inf, hence two keys.
    is_nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, dtype=bool)
    value_key = np.where(is_nan, 0.0, -x.astype(np.float64))
    order = np.lexsort((value_key, ~is_nan), axis=-1)
    return order[..., : op.k].astype(np.int32)


@reference(ops.Argmax)
def ref_argmax(op, args, node):
    (x,) = args
    has_nan = np.isnan(x)
    first_nan = np.argmax(has_nan, axis=-1)
    return np.where(has_nan.any(axis=-1), first_nan, np.argmax(x, axis=-1)).astype(np.int32)

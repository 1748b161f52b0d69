"""Reference semantics of the shape family: views and data movement."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference
from rlxpy.ir.shape import normalize_axis


@reference(ops.Reshape)
def ref_reshape(op, args, node):
    return args[0].reshape(node.shape)


@reference(ops.Transpose)
def ref_transpose(op: ops.Transpose, args, node):
    return np.transpose(args[0], op.perm)


@reference(ops.Narrow)
def ref_narrow(op: ops.Narrow, args, node):
    (x,) = args
    axis = normalize_axis(op.axis, x.ndim)
    index = [slice(None)] * x.ndim
    index[axis] = slice(op.start, op.start + op.length)
    return x[tuple(index)]


@reference(ops.Concat)
def ref_concat(op: ops.Concat, args, node):
    return np.concatenate(args, axis=normalize_axis(op.axis, args[0].ndim))


@reference(ops.Expand)
def ref_expand(op: ops.Expand, args, node):
    return np.broadcast_to(args[0], node.shape).copy()


def clamp_indices(idx: np.ndarray, dim: int) -> np.ndarray:
    """Gather's index rule: truncate fractions, clamp into [0, dim-1]."""
    return np.clip(np.trunc(idx.astype(np.float64)), 0, max(dim - 1, 0)).astype(np.int64)


@reference(ops.Gather)
def ref_gather(op: ops.Gather, args, node):
    table, idx = args
    axis = normalize_axis(op.axis, table.ndim)
    return np.take(table, clamp_indices(idx, table.shape[axis]), axis=axis)


@reference(ops.ScatterAdd)
def ref_scatter_add(op: ops.ScatterAdd, args, node):
    updates, idx = args
    out = np.zeros(node.shape, dtype=updates.dtype)
    rows = np.trunc(idx.astype(np.float64)).astype(np.int64)
    keep = (rows >= 0) & (rows < op.out_dim)
    np.add.at(out, rows[keep], updates[keep])
    return out

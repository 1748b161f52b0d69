"""Reference semantics of the shape family: views, data movement and resampling (Resize)."""

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


def resize_sources(op: ops.Resize, dim: int, size_in: int) -> np.ndarray:
    """The f32 source coordinate of every output index of resized dim ``dim`` (ResizeCoord)."""
    out = op.sizes[dim]
    step = np.float32(op.step(dim, size_in))
    o = np.arange(out, dtype=np.float32)
    if op.coord in (ops.ResizeCoord.ASYMMETRIC, ops.ResizeCoord.ALIGN_CORNERS):
        return o * step
    src = (o + np.float32(0.5)) * step - np.float32(0.5)
    if op.coord is ops.ResizeCoord.PYTORCH_HALF_PIXEL and out == 1:
        return np.zeros(1, np.float32)
    return src


_NEAREST = {
    ops.ResizeMode.NEAREST_FLOOR: np.floor,
    ops.ResizeMode.NEAREST_CEIL: np.ceil,
    ops.ResizeMode.NEAREST_ROUND_PREFER_FLOOR: lambda s: np.ceil(s - np.float32(0.5)),
    ops.ResizeMode.NEAREST_ROUND_PREFER_CEIL: lambda s: np.floor(s + np.float32(0.5)),
}


def _resample(x: np.ndarray, axis: int, op: ops.Resize, dim: int) -> np.ndarray:
    """x (f64) resampled along ``axis`` (resized dim ``dim``)."""
    size_in = x.shape[axis]
    src = resize_sources(op, dim, size_in)
    if op.mode in _NEAREST:
        index = np.clip(_NEAREST[op.mode](src), 0, size_in - 1).astype(np.int64)
        return np.take(x, index, axis=axis)
    s = np.maximum(src, np.float32(0))
    i0 = np.minimum(np.floor(s), size_in - 1).astype(np.int64)
    i1 = np.minimum(i0 + 1, size_in - 1)
    f = np.minimum(s - i0.astype(np.float32), np.float32(1))  # f32 weights, as the kernel and torch
    shape = [1] * x.ndim
    shape[axis] = -1
    w1 = f.astype(np.float64).reshape(shape)
    w0 = (np.float32(1) - f).astype(np.float64).reshape(shape)
    return np.take(x, i0, axis=axis) * w0 + np.take(x, i1, axis=axis) * w1


@reference(ops.Resize)
def ref_resize(op: ops.Resize, args, node):
    (x,) = args
    y = x.astype(np.float64)
    first = x.ndim - len(op.sizes)
    with np.errstate(all="ignore"):  # inf * 0 is NaN, as in torch
        for dim in range(len(op.sizes)):
            y = _resample(y, first + dim, op, dim)
    return y.astype(x.dtype)

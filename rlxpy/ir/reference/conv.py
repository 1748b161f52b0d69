"""Reference semantics: convolution, transposed convolution, pooling, adaptive pooling, im2col
(numpy, float64 accumulation).

The windowed ops walk the kernel taps: for each tap offset t the strided slice
``x_pad[..., t*d : t*d + s*(out-1) + 1 : s]`` holds that tap's input for every output position.
ConvTranspose gathers per tap too: output q reads input (q + pb - t*d)/s where that is exact.
"""

from __future__ import annotations

import itertools

import numpy as np

from rlxpy.ir.ops.base import ReduceOp
from rlxpy.ir.ops.conv import AdaptivePool, Conv, ConvTranspose, Geometry, Im2Col, Pool, adaptive_bin
from rlxpy.ir.reference.core import reference
from rlxpy.ir.reference.elementwise import apply_activation


def _tap_slices(tap: tuple[int, ...], stride, dilation, out_sizes) -> tuple[slice, ...]:
    return tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                 for t, s, d, o in zip(tap, stride, dilation, out_sizes))


def _pad(x: np.ndarray, begin, end, value: float) -> np.ndarray:
    widths = [(0, 0), (0, 0)] + [(b, e) for b, e in zip(begin, end)]
    return np.pad(x, widths, constant_values=value)


def conv_nd(x: np.ndarray, w: np.ndarray, geo: Geometry, groups: int, out_sizes) -> np.ndarray:
    """Grouped N-d cross-correlation in float64 (torch.nn.functional.conv*d without bias)."""
    batch, c_in = x.shape[:2]
    c_out = w.shape[0]
    x_pad = _pad(x.astype(np.float64), geo.begin, geo.end, 0.0)
    w64 = w.astype(np.float64).reshape((groups, c_out // groups, c_in // groups) + w.shape[2:])
    out = np.zeros((batch, groups, c_out // groups) + tuple(out_sizes))
    with np.errstate(all="ignore"):  # inf * 0 in padding is NaN, as in torch
        for tap in itertools.product(*(range(k) for k in w.shape[2:])):
            patch = x_pad[(slice(None), slice(None)) + _tap_slices(tap, geo.stride, geo.dilation, out_sizes)]
            patch = patch.reshape((batch, groups, c_in // groups) + tuple(out_sizes))
            out += np.einsum("ngc...,goc->ngo...", patch, w64[(Ellipsis,) + tap])
    return out.reshape((batch, c_out) + tuple(out_sizes))


def _epilogue(y: np.ndarray, bias: np.ndarray | None, activation, dtype,
              residual: np.ndarray | None = None) -> np.ndarray:
    """``act(y + bias + residual)`` with bias per channel (axis 1), in float64, rounded once to
    ``dtype``."""
    with np.errstate(all="ignore"):
        if bias is not None:
            y = y + bias.astype(np.float64).reshape((1, -1) + (1,) * (y.ndim - 2))
        if residual is not None:
            y = y + residual.astype(np.float64)
        if activation is not None:
            y = apply_activation(activation, y)
    return y.astype(dtype)


@reference(Conv)
def ref_conv(op: Conv, args, node):
    x, w = args[0], args[1]
    geo = op.geometry(x.ndim - 2)
    y = conv_nd(x, w, geo, op.groups, node.shape[2:])
    args, residual = (args[:-1], args[-1]) if op.residual else (args, None)
    return _epilogue(y, args[2] if len(args) > 2 else None, op.activation, x.dtype, residual)


def _transposed_taps(tap, geo: Geometry, in_sizes, out_sizes) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """For one tap: per output position the input index it reads, (q + pb - t*d)/s (clipped), and
    whether that division is exact and inside the input (an [*out] mask)."""
    index, mask = [], np.ones(tuple(out_sizes), bool)
    for i, (t, n, o) in enumerate(zip(tap, in_sizes, out_sizes)):
        num = np.arange(o) + geo.begin[i] - t * geo.dilation[i]
        ok = (num >= 0) & (num % geo.stride[i] == 0) & (num // geo.stride[i] < n)
        index.append(np.clip(num // geo.stride[i], 0, n - 1))
        mask = mask & ok.reshape([-1 if j == i else 1 for j in range(len(out_sizes))])
    return tuple(np.ix_(*index)), mask


def conv_transpose_nd(x: np.ndarray, w: np.ndarray, geo: Geometry, groups: int, out_sizes) -> np.ndarray:
    """Grouped N-d transposed convolution in float64, as a gather: every output position takes every
    tap, reading x where (q + pb - t*d)/s is exact and inside the input and a (multiplied) zero
    elsewhere."""
    batch, c_in = x.shape[:2]
    in_sizes = x.shape[2:]
    c_group = c_in // groups
    o_group = w.shape[1]
    x64 = x.astype(np.float64)
    w64 = w.astype(np.float64).reshape((groups, c_group, o_group) + w.shape[2:])
    acc = np.zeros((batch, groups, o_group) + tuple(out_sizes))
    with np.errstate(all="ignore"):
        for tap in itertools.product(*(range(k) for k in w.shape[2:])):
            index, mask = _transposed_taps(tap, geo, in_sizes, out_sizes)
            patch = np.where(mask, x64[(slice(None), slice(None)) + index], 0.0)
            patch = patch.reshape((batch, groups, c_group) + tuple(out_sizes))
            acc += np.einsum("ngc...,gco->ngo...", patch, w64[(Ellipsis,) + tap])
    return acc.reshape((batch, groups * o_group) + tuple(out_sizes))


@reference(ConvTranspose)
def ref_conv_transpose(op: ConvTranspose, args, node):
    x, w = args[0], args[1]
    geo = op.geometry(x.ndim - 2)
    y = conv_transpose_nd(x, w, geo, op.groups, node.shape[2:])
    return _epilogue(y, args[2] if len(args) > 2 else None, op.activation, x.dtype)


#: (identity used for taps outside the input, combine) per pool kind; mean sums, then divides.
_POOL = {
    ReduceOp.SUM: (0.0, np.add), ReduceOp.MEAN: (0.0, np.add), ReduceOp.MAX: (-np.inf, np.maximum),
    ReduceOp.MIN: (np.inf, np.minimum), ReduceOp.PROD: (1.0, np.multiply),
}


def _tap_counts(size: int, out: int, geo: Geometry, i: int, lo: int, hi: int) -> np.ndarray:
    """Per output position along dim ``i``: how many of its taps fall in [lo, hi) (input coordinates)."""
    starts = np.arange(out) * geo.stride[i] - geo.begin[i]
    taps = starts[:, None] + np.arange(geo.kernel[i])[None, :] * geo.dilation[i]
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


def pool_divisor(op: Pool, in_sizes, out_sizes, geo: Geometry) -> np.ndarray:
    """The mean's divisor per output position (broadcast over N, C)."""
    if op.divisor > 0:
        return np.asarray(float(op.divisor))
    total = np.ones(tuple(out_sizes))
    for i, (size, out) in enumerate(zip(in_sizes, out_sizes)):
        lo, hi = (-geo.begin[i], size + geo.end[i]) if op.count_include_pad else (0, size)
        shape = [1] * len(out_sizes)
        shape[i] = out
        total = total * _tap_counts(size, out, geo, i, lo, hi).reshape(shape)
    return total


@reference(Pool)
def ref_pool(op: Pool, args, node):
    (x,) = args
    geo = op.geometry(x.ndim - 2)
    identity, combine = _POOL[op.kind]
    out_sizes = node.shape[2:]
    in_sizes = x.shape[2:]
    # the last window (ceil_mode) may reach past the padded input: those taps are identity too
    ends = [max(e, (o - 1) * s + geo.span(i) - b - n)
            for i, (n, o, s, b, e) in enumerate(zip(in_sizes, out_sizes, geo.stride, geo.begin, geo.end))]
    x_pad = _pad(x.astype(np.float64), geo.begin, ends, identity)
    acc = np.full(tuple(x.shape[:2]) + tuple(out_sizes), identity)
    with np.errstate(all="ignore"):
        for tap in itertools.product(*(range(k) for k in geo.kernel)):
            acc = combine(acc, x_pad[(slice(None), slice(None)) + _tap_slices(tap, geo.stride, geo.dilation,
                                                                               out_sizes)])
        if op.kind is ReduceOp.MEAN:
            acc = acc / pool_divisor(op, in_sizes, out_sizes, geo)
    return acc.astype(x.dtype)


@reference(AdaptivePool)
def ref_adaptive_pool(op: AdaptivePool, args, node):
    """Bins are boxes, so the pool runs one spatial dim at a time (exact in float64)."""
    (x,) = args
    _, combine = _POOL[op.kind]
    acc = x.astype(np.float64)
    with np.errstate(all="ignore"):
        for axis, out in enumerate(node.shape[2:], start=2):
            size = acc.shape[axis]
            bins = []
            for i in range(out):
                start, end = adaptive_bin(i, size, out)
                part = np.take(acc, range(start, end), axis=axis)
                value = combine.reduce(part, axis=axis, keepdims=True)
                bins.append(value / (end - start) if op.kind is ReduceOp.MEAN else value)
            acc = np.concatenate(bins, axis=axis)
    return acc.astype(x.dtype)


@reference(Im2Col)
def ref_im2col(op: Im2Col, args, node):
    (x,) = args
    kernel, stride, padding, dilation = op.windows()
    batch, channels, height, width = x.shape
    out_sizes = ((height + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1,
                 (width + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1)
    x_pad = _pad(x, padding, padding, 0.0)
    cols = np.zeros((batch, channels, kernel[0], kernel[1]) + out_sizes, dtype=x.dtype)
    for ki, kj in itertools.product(range(kernel[0]), range(kernel[1])):
        taps = _tap_slices((ki, kj), stride, dilation, out_sizes)
        cols[:, :, ki, kj] = x_pad[(slice(None), slice(None)) + taps]
    # [N, C, kH, kW, Ho, Wo] -> rows (n, ho, wo), columns (c, ki, kj)
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(node.shape)

"""Reference semantics: convolution, pooling, im2col (numpy, float64 accumulation).

All three walk the kernel taps: for each tap offset t the strided slice
``x_pad[..., t*d : t*d + s*(out-1) + 1 : s]`` holds that tap's input for every output position.
"""

from __future__ import annotations

import itertools

import numpy as np

from rlxpy.ir.ops.base import ReduceOp
from rlxpy.ir.ops.conv import Conv, Im2Col, Pool
from rlxpy.ir.reference.core import reference


def _tap_slices(tap: tuple[int, ...], stride, dilation, out_sizes) -> tuple[slice, ...]:
    return tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                 for t, s, d, o in zip(tap, stride, dilation, out_sizes))


def _pad(x: np.ndarray, padding, value: float) -> np.ndarray:
    widths = [(0, 0), (0, 0)] + [(p, p) for p in padding]
    return np.pad(x, widths, constant_values=value)


def conv_nd(x: np.ndarray, w: np.ndarray, stride, padding, dilation, groups: int, out_sizes) -> np.ndarray:
    """Grouped N-d cross-correlation in float64 (torch.nn.functional.conv*d without bias)."""
    batch, c_in = x.shape[:2]
    c_out = w.shape[0]
    x_pad = _pad(x.astype(np.float64), padding, 0.0)
    w64 = w.astype(np.float64).reshape((groups, c_out // groups, c_in // groups) + w.shape[2:])
    out = np.zeros((batch, groups, c_out // groups) + tuple(out_sizes))
    for tap in itertools.product(*(range(k) for k in w.shape[2:])):
        patch = x_pad[(slice(None), slice(None)) + _tap_slices(tap, stride, dilation, out_sizes)]
        patch = patch.reshape((batch, groups, c_in // groups) + tuple(out_sizes))
        out += np.einsum("ngc...,goc->ngo...", patch, w64[(Ellipsis,) + tap])
    return out.reshape((batch, c_out) + tuple(out_sizes))


@reference(Conv)
def ref_conv(op: Conv, args, node):
    x, w = args
    _, stride, padding, dilation = op.windows(x.ndim - 2)
    return conv_nd(x, w, stride, padding, dilation, op.groups, node.shape[2:]).astype(x.dtype)


#: (identity used for padded taps, combine) per pool kind; mean sums, then divides.
_POOL = {
    ReduceOp.SUM: (0.0, np.add), ReduceOp.MEAN: (0.0, np.add), ReduceOp.MAX: (-np.inf, np.maximum),
    ReduceOp.MIN: (np.inf, np.minimum), ReduceOp.PROD: (1.0, np.multiply),
}


@reference(Pool)
def ref_pool(op: Pool, args, node):
    (x,) = args
    kernel, stride, padding = op.windows(x.ndim - 2)
    identity, combine = _POOL[op.kind]
    out_sizes = node.shape[2:]
    x_pad = _pad(x.astype(np.float64), padding, identity)
    ones = (1,) * len(kernel)
    acc = np.full(tuple(x.shape[:2]) + tuple(out_sizes), identity)
    with np.errstate(all="ignore"):
        for tap in itertools.product(*(range(k) for k in kernel)):
            acc = combine(acc, x_pad[(slice(None), slice(None)) + _tap_slices(tap, stride, ones, out_sizes)])
        if op.kind is ReduceOp.MEAN:
            acc = acc / float(np.prod(kernel))  # count_include_pad: the full kernel volume
    return acc.astype(x.dtype)


@reference(Im2Col)
def ref_im2col(op: Im2Col, args, node):
    (x,) = args
    kernel, stride, padding, dilation = op.windows()
    batch, channels, height, width = x.shape
    out_sizes = ((height + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1,
                 (width + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1)
    x_pad = _pad(x, padding, 0.0)
    cols = np.zeros((batch, channels, kernel[0], kernel[1]) + out_sizes, dtype=x.dtype)
    for ki, kj in itertools.product(range(kernel[0]), range(kernel[1])):
        taps = _tap_slices((ki, kj), stride, dilation, out_sizes)
        cols[:, :, ki, kj] = x_pad[(slice(None), slice(None)) + taps]
    # [N, C, kH, kW, Ho, Wo] -> rows (n, ho, wo), columns (c, ki, kj)
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(node.shape)

"""Gradient rules of the conv family: Conv, ConvTranspose, Pool, AdaptivePool and Im2Col.

The convolutions are each other's adjoints, so their gradients are convolutions again:

* Conv's dx is a ConvTranspose of dy with the same weights and window; ConvTranspose's dx is a
  Conv of dy with them. The padding after each dim (or ConvTranspose's output_padding) is chosen
  so that the result has the input's size exactly (the taps that fell off the end of the forward's
  padded input are not read back).
* Both weight gradients are one grouped Conv that correlates the padded "data" tensor (Conv: x;
  ConvTranspose: dy) with the other (dy; x) over the batch: the batch becomes the channels, the
  forward's dilation the stride and its stride the dilation (``weight_grad``).
* A bias's gradient is dy summed over the batch and the positions; a fused activation epilogue is
  differentiated first, at the pre-activation recomputed by the same convolution without it.

Pools go through the backward family's PoolBackward (one kernel: every input element sums the dy of
the windows it lies in, divided by a mean's divisor, or, for max/min, only those it wins). Im2Col's
gradient (col2im) is a depthwise ConvTranspose of the columns with one-hot weights.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.grad.elementwise import activation_grad
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import ReduceOp
from rlxpy.ir.ops.conv import Geometry, out_sizes


def _end_fit(geo: Geometry, i: int, taps: int, data: int, stride: int, dilation: int) -> int:
    """How far ``taps`` positions of a window (stride, dilation) that starts ``geo.begin[i]`` before
    the data reach past its end: the padding after that dim a gather needs (< 0: the window stops
    short of the end by that much)."""
    return stride * (taps - 1) + dilation * (geo.kernel[i] - 1) + 1 - data - geo.begin[i]


def _narrow_to(ctx: GradContext, t: Node, sizes: tuple[int, ...]) -> Node:
    """``t`` cut to ``sizes`` along its spatial dims (2, 3, ...) where it is longer."""
    for i, size in enumerate(sizes):
        if t.shape[2 + i] > size:
            t = ctx.g.narrow(t, 2 + i, 0, size)
    return t


def _pre_activation(ctx: GradContext, node: Node, dy: Node) -> Node:
    """dy at the convolution's pre-activation value (dy itself without an epilogue)."""
    act = node.op.activation
    if act is None:
        return dy
    plain = ctx.g.apply(replace(node.op, activation=None), ctx.inputs(node), ctx.name(node, "pre"))
    return activation_grad(ctx, act, plain, node, dy, ctx.name(node, "act"))


def _bias_grad(ctx: GradContext, node: Node, dy: Node) -> Node:
    channels = dy.shape[1]
    summed = ctx.sum_to(dy, (channels,) + (1,) * (dy.rank - 2))
    return ctx.g.reshape(summed, (channels,), ctx.name(node, "bias"))


def weight_grad(ctx: GradContext, data: Node, other: Node, groups: int, geo: Geometry, name: str) -> Node:
    """``dw[c_o, c_d, t] = sum_{n, p} other[n, g*C_o/G + c_o, p] * data_pad[n, g*C_d/G + c_d, p*s + t*d]``
    as [C_o, C_d/G, *kernel], data_pad being ``data`` padded by ``geo.begin`` before each dim.

    One Conv of data' [C_d/G, G*N, *data] (group g's channels are its N samples) with the kernel
    other' [C_o, N, *other] in G groups, stride d and dilation s: output [C_d/G, C_o, *kernel'],
    cut to the kernel and transposed."""
    g = ctx.g
    batch, c_data = data.shape[0], data.shape[1]
    spatial = data.rank - 2
    data_sizes, other_sizes = tuple(data.shape[2:]), tuple(other.shape[2:])
    split = g.reshape(data, (batch, groups, c_data // groups) + data_sizes)
    perm = (2, 1, 0) + tuple(range(3, 3 + spatial))
    data_t = g.reshape(g.transpose(split, perm), (c_data // groups, groups * batch) + data_sizes)
    other_t = g.transpose(other, (1, 0) + tuple(range(2, 2 + spatial)))
    ends = tuple(max(0, _end_fit(geo, i, other_sizes[i], data_sizes[i], geo.stride[i], geo.dilation[i]))
                 for i in range(spatial))
    corr = g.conv(data_t, other_t, stride=geo.dilation, padding=geo.begin, dilation=geo.stride,
                  groups=groups, padding_end=ends)
    corr = _narrow_to(ctx, corr, geo.kernel)
    return g.transpose(corr, (1, 0) + tuple(range(2, 2 + spatial)), name)


def spread(ctx: GradContext, dy: Node, w: Node, geo: Geometry, groups: int, in_sizes: tuple[int, ...],
           name: str | None) -> Node:
    """The adjoint of a Conv with window ``geo`` over an input of ``in_sizes``: a ConvTranspose of dy
    with ``w`` whose end padding / output_padding make its output exactly ``in_sizes``."""
    ends, extra = [], []
    for i, size in enumerate(in_sizes):
        reach = _end_fit(geo, i, dy.shape[2 + i], size, geo.stride[i], geo.dilation[i])
        ends.append(max(reach, 0))
        extra.append(max(-reach, 0))
    return ctx.g.conv_transpose(dy, w, stride=geo.stride, padding=geo.begin, output_padding=extra,
                                dilation=geo.dilation, groups=groups, name=name, padding_end=ends)


@vjp(ops.Conv)
def grad_conv(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    op: ops.Conv = node.op  # type: ignore[assignment]
    x, w, *bias = ctx.inputs(node)
    residual = bias.pop() if op.residual else None  # the fused shortcut: its gradient is dz
    geo = op.geometry(x.rank - 2)
    dz = _pre_activation(ctx, node, dy)
    dx = spread(ctx, dz, w, geo, op.groups, tuple(x.shape[2:]), ctx.name(node, "x")) \
        if ctx.needs(node, 0) else None
    dw = weight_grad(ctx, x, dz, op.groups, geo, ctx.name(node, "w")) if ctx.needs(node, 1) else None
    grads: list[Node | None] = [dx, dw]
    if bias:
        grads.append(_bias_grad(ctx, node, dz) if ctx.needs(node, 2) else None)
    if residual is not None:
        grads.append(dz if ctx.needs(node, len(grads)) else None)
    return grads


@vjp(ops.ConvTranspose)
def grad_conv_transpose(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    op: ops.ConvTranspose = node.op  # type: ignore[assignment]
    x, w, *bias = ctx.inputs(node)
    spatial = x.rank - 2
    geo = op.geometry(spatial)
    in_sizes = tuple(x.shape[2:])
    dz = _pre_activation(ctx, node, dy)
    dx = dw = None
    if ctx.needs(node, 0):  # a Conv of dy reads exactly the taps the forward wrote
        ends = tuple(max(0, _end_fit(geo, i, in_sizes[i], dz.shape[2 + i], geo.stride[i], geo.dilation[i]))
                     for i in range(spatial))
        dx = ctx.g.conv(dz, w, stride=geo.stride, padding=geo.begin, dilation=geo.dilation, groups=op.groups,
                        padding_end=ends)
        dx = _narrow_to(ctx, dx, in_sizes)
        dx = ctx.g.reshape(dx, x.shape, ctx.name(node, "x"))
    if ctx.needs(node, 1):
        dw = weight_grad(ctx, dz, x, op.groups, geo, ctx.name(node, "w"))
    grads: list[Node | None] = [dx, dw]
    if bias:
        grads.append(_bias_grad(ctx, node, dz) if ctx.needs(node, 2) else None)
    return grads


@vjp(ops.Pool, ops.AdaptivePool)
def grad_pool(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    if node.op.kind is ReduceOp.PROD:
        raise UnsupportedOpError(f"{where(node)}: product pooling has no gradient rule")
    x = ctx.input(node, 0)
    return [ctx.g.apply(ops.PoolBackward.of(node.op), [x, node, dy], ctx.name(node, "x"))]


@vjp(ops.Im2Col)
def grad_im2col(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """col2im: the columns [N*Ho*Wo, C*kh*kw] as [N, C*kh*kw, Ho, Wo], each tap's channel spread back
    by a ConvTranspose in C groups whose weight is one at that tap."""
    op: ops.Im2Col = node.op  # type: ignore[assignment]
    x = ctx.input(node, 0)
    kernel, stride, padding, dilation = op.windows()
    batch, channels = x.shape[0], x.shape[1]
    taps = math.prod(kernel)
    geo = Geometry(kernel, stride, padding, padding, dilation)
    positions = out_sizes(x.type, geo, "im2col")
    cols = ctx.g.reshape(dy, (batch,) + tuple(positions) + (channels * taps,))
    cols = ctx.g.transpose(cols, (0, 3, 1, 2))
    one_hot = np.tile(np.eye(taps).reshape(taps, 1, *kernel), (channels, 1, 1, 1))
    weight = ctx.g.constant(one_hot, dtype=dy.dtype)
    return [spread(ctx, cols, weight, geo, channels, tuple(x.shape[2:]), ctx.name(node, "x"))]

"""Gradient rules of the norm family: Softmax, LayerNorm, RmsNorm and their residual-fused forms,
through the backward family's norm ops (one kernel each for dx, d gamma, d beta); GroupNorm (and
so instance norm, and a training batch norm written as a GroupNorm over the batch) and BatchNorm
with given statistics in primitives.

The fused residual norms recompute ``s = x + residual (+ bias)`` and differentiate the norm at s;
x and residual both get ds, the bias its column sums. ResidualNormTee exists only after the pattern
pass (compile time), so it has no rule.
"""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import ActKind, ReduceOp
from rlxpy.ir.shape import normalize_axis


@vjp(ops.Softmax)
def grad_softmax(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """dx = y (dy - sum(dy y))."""
    axis = normalize_axis(node.op.axis, node.rank)
    dot = ctx.reduce_sum(ctx.mul(dy, node), [axis], keep_dim=True)
    return [ctx.mul(node, ctx.sub(dy, dot), ctx.name(node, "x"))]


def _column_sum(ctx: GradContext, node: Node, dy: Node, part: str) -> Node:
    return ctx.sum_to(dy, (dy.shape[-1],), ctx.name(node, part))


def norm_grads(ctx: GradContext, node: Node, rms: bool, x: Node, gamma: Node, beta: Node | None, dy: Node,
               eps: float, want: tuple[bool, bool, bool]) -> tuple[Node | None, Node | None, Node | None]:
    """(dx, d gamma, d beta) of LayerNorm / RmsNorm at ``x``."""
    want_x, want_gamma, want_beta = want
    g = ctx.g
    dx = dgamma = dbeta = None
    if rms:
        if want_x:
            dx = g.rms_norm_backward_input(x, gamma, dy, beta, eps, ctx.name(node, "x"))
        if want_gamma:
            dgamma = g.rms_norm_backward_gamma(x, gamma, dy, beta, eps, ctx.name(node, "gamma"))
        if want_beta:
            dbeta = g.rms_norm_backward_beta(x, gamma, dy, beta, eps, ctx.name(node, "beta"))
    else:
        if want_x:
            dx = g.layer_norm_backward_input(x, gamma, dy, eps, ctx.name(node, "x"))
        if want_gamma:
            dgamma = g.layer_norm_backward_gamma(x, dy, eps, ctx.name(node, "gamma"))
        if want_beta:
            dbeta = _column_sum(ctx, node, dy, "beta")
    return dx, dgamma, dbeta


@vjp(ops.LayerNorm, ops.RmsNorm)
def grad_norm(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    x, gamma, *beta = ctx.inputs(node)
    want = (ctx.needs(node, 0), ctx.needs(node, 1), bool(beta) and ctx.needs(node, 2))
    grads = norm_grads(ctx, node, isinstance(node.op, ops.RmsNorm), x, gamma, beta[0] if beta else None, dy,
                       node.op.eps, want)
    return list(grads[:len(node.inputs)])


@vjp(ops.FusedResidualLN, ops.FusedResidualRmsNorm)
def grad_residual_norm(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """Inputs x, residual, [bias], gamma, beta."""
    ins = ctx.inputs(node)
    has_bias = node.op.has_bias
    x, residual = ins[0], ins[1]
    gamma, beta = ins[-2], ins[-1]
    total = ctx.add(x, residual)
    if has_bias:
        total = ctx.add(total, ins[2])
    wants_sum = any(ctx.needs(node, i) for i in range(3 if has_bias else 2))
    n = len(ins)
    want = (wants_sum, ctx.needs(node, n - 2), ctx.needs(node, n - 1))
    rms = isinstance(node.op, ops.FusedResidualRmsNorm)
    ds, dgamma, dbeta = norm_grads(ctx, node, rms, total, gamma, beta, dy, node.op.eps, want)
    grads: list[Node | None] = [ds, ds]
    if has_bias:
        grads.append(_column_sum(ctx, node, ds, "bias") if ds is not None and ctx.needs(node, 2) else None)
    return grads + [dgamma, dbeta]


def _per_channel(ctx: GradContext, t: Node, like: Node) -> Node:
    """A [C] tensor shaped [1, C, 1, ...] to broadcast over ``like`` [N, C, *spatial]."""
    return ctx.g.reshape(t, (1, t.shape[0]) + (1,) * (like.rank - 2))


def _channel_sum(ctx: GradContext, t: Node, name: str) -> Node:
    """[N, C, *spatial] summed to [C]."""
    channels = t.shape[1]
    return ctx.g.reshape(ctx.sum_to(t, (channels,) + (1,) * (t.rank - 2)), (channels,), name)


def _mean_last(ctx: GradContext, t: Node) -> Node:
    return ctx.g.apply(ops.Reduce(ReduceOp.MEAN, (t.rank - 1,), True), [t])


@vjp(ops.GroupNorm)
def grad_group_norm(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """Per (sample, group) of M values: with xhat = (x - mean) rstd,
    ``dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))``, dxhat = dy gamma; d gamma and
    d beta are the channel sums of dy xhat and dy. The statistics are recomputed."""
    x, gamma, *beta = ctx.inputs(node)
    g = ctx.g
    groups = node.op.groups
    grouped = (x.shape[0], groups, x.numel // (x.shape[0] * groups))
    xs = g.reshape(x, grouped)
    centred = ctx.sub(xs, _mean_last(ctx, xs))
    rstd = g.activation(ctx.add(_mean_last(ctx, ctx.mul(centred, centred)), node.op.eps), ActKind.RSQRT)
    xhat = ctx.mul(centred, rstd)
    grads: list[Node | None] = [None, None]
    if ctx.needs(node, 0):
        dxhat = g.reshape(ctx.mul(dy, _per_channel(ctx, gamma, x)), grouped)
        along = ctx.mul(xhat, _mean_last(ctx, ctx.mul(dxhat, xhat)))
        inner = ctx.sub(ctx.sub(dxhat, _mean_last(ctx, dxhat)), along)
        grads[0] = g.reshape(ctx.mul(inner, rstd), x.shape, ctx.name(node, "x"))
    if ctx.needs(node, 1):
        grads[1] = _channel_sum(ctx, ctx.mul(dy, g.reshape(xhat, x.shape)), ctx.name(node, "gamma"))
    if beta:
        grads.append(_channel_sum(ctx, dy, ctx.name(node, "beta")) if ctx.needs(node, 2) else None)
    return grads


@vjp(ops.BatchNorm)
def grad_batch_norm(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """y = (x - mean) inv gamma + beta with inv = (var + eps)^-1/2 per channel (given statistics, so
    mean and var are inputs like any other: d mean = -sum(dy) gamma inv, d var = -sum(dy (x - mean))
    gamma inv^3 / 2)."""
    x, mean, var, gamma, _ = ctx.inputs(node)
    g = ctx.g
    inv = g.activation(ctx.add(var, node.op.eps), ActKind.RSQRT)
    scale = ctx.mul(gamma, inv)
    centred = ctx.sub(x, _per_channel(ctx, mean, x))
    grads: list[Node | None] = [None] * 5
    if ctx.needs(node, 0):
        grads[0] = ctx.mul(dy, _per_channel(ctx, scale, x), ctx.name(node, "x"))
    if ctx.needs(node, 1):
        total = _channel_sum(ctx, dy, ctx.name(node, "sum"))
        grads[1] = ctx.mul(ctx.neg(total), scale, ctx.name(node, "mean"))
    if ctx.needs(node, 2):
        dot = _channel_sum(ctx, ctx.mul(dy, centred), ctx.name(node, "dot"))
        cube = ctx.mul(ctx.mul(inv, inv), scale)
        grads[2] = ctx.mul(ctx.mul(dot, cube), -0.5, ctx.name(node, "var"))
    if ctx.needs(node, 3):
        grads[3] = _channel_sum(ctx, ctx.mul(ctx.mul(dy, centred), _per_channel(ctx, inv, x)),
                                ctx.name(node, "gamma"))
    if ctx.needs(node, 4):
        grads[4] = _channel_sum(ctx, dy, ctx.name(node, "beta"))
    return grads

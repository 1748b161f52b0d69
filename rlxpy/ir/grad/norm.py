"""Gradient rules of the norm family: Softmax, LayerNorm, RmsNorm and their residual-fused forms,
through the backward family's norm ops (one kernel each for dx, d gamma, d beta).

The fused residual norms recompute ``s = x + residual (+ bias)`` and differentiate the norm at s;
x and residual both get ds, the bias its column sums. ResidualNormTee exists only after the pattern
pass (compile time), so it has no rule.
"""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node
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

"""Gradient rules of the reduce family: Reduce (sum, mean, max, min, prod) and Cumsum. TopK and
Argmax return indices: no gradient.

max/min hand dy to every element equal to the result, split evenly among ties (torch's amax/amin);
prod's gradient is the product of the other elements, exact when the slice holds zeros too.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import CmpOp, ReduceOp
from rlxpy.ir.shape import normalize_axis


def _axes(node: Node, x: Node) -> list[int]:
    return sorted({normalize_axis(a, x.rank) for a in node.op.axes})


def expand_back(ctx: GradContext, value: Node, x: Node, axes: list[int], keep_dim: bool) -> Node:
    """A reduced tensor broadcast back over the reduced ``axes`` of ``x``."""
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if not keep_dim:
        value = ctx.g.reshape(value, kept)
    return value if kept == tuple(x.shape) else ctx.g.expand(value, x.shape)


@vjp(ops.Reduce)
def grad_reduce(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    x = ctx.input(node, 0)
    op: ops.Reduce = node.op  # type: ignore[assignment]
    axes = _axes(node, x)
    dy_e = expand_back(ctx, dy, x, axes, op.keep_dim)
    name = ctx.name(node, "x")
    if op.op is ReduceOp.SUM:
        return [dy_e]
    if op.op is ReduceOp.MEAN:
        count = math.prod(x.shape[a] for a in axes)
        return [ctx.mul(dy_e, 1.0 / count, name)]
    y_e = expand_back(ctx, node, x, axes, op.keep_dim)
    if op.op in (ReduceOp.MAX, ReduceOp.MIN):
        hit = ctx.g.cast(ctx.compare(x, y_e, CmpOp.EQ), x.dtype)
        ties = expand_back(ctx, ctx.reduce_sum(hit, axes, keep_dim=True), x, axes, True)
        return [ctx.mul(ctx.div(dy_e, ties), hit, name)]
    # PROD: y / x where x != 0; at a zero, the product of the others (nonzero only when it is the
    # slice's only zero)
    is_zero = ctx.compare(x, 0.0, CmpOp.EQ)
    others = ctx.g.apply(ops.Reduce(ReduceOp.PROD, tuple(axes), True), [ctx.where(is_zero, 1.0, x, x)])
    zeros = ctx.reduce_sum(ctx.g.cast(is_zero, x.dtype), axes, keep_dim=True)
    at_zero = ctx.where(ctx.compare(zeros, 1.0, CmpOp.EQ), others, 0.0, x)
    slope = ctx.where(is_zero, expand_back(ctx, at_zero, x, axes, True),
                      ctx.div(y_e, ctx.where(is_zero, 1.0, x, x)), x)
    return [ctx.mul(dy_e, slope, name)]


@vjp(ops.Cumsum)
def grad_cumsum(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    op: ops.Cumsum = node.op  # type: ignore[assignment]
    return [ctx.g.cumsum_backward(dy, op.axis, op.exclusive, ctx.name(node, "x"))]

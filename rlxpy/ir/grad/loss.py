"""Gradient rules of the loss family: LogSoftmax (``dx = dy - exp(y) sum(dy)``, primitives) and
CrossEntropy (the backward family's CrossEntropyBackward: ``(softmax - onehot) dy`` per row, fused)."""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node
from rlxpy.ir.shape import normalize_axis


@vjp(ops.LogSoftmax)
def grad_log_softmax(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    axis = normalize_axis(node.op.axis, node.rank)
    total = ctx.reduce_sum(dy, [axis], keep_dim=True)
    return [ctx.sub(dy, ctx.mul(ctx.g.exp(node), total), ctx.name(node, "x"))]


@vjp(ops.CrossEntropy)
def grad_cross_entropy(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    logits, targets = ctx.inputs(node)
    return [ctx.g.cross_entropy_backward(logits, targets, dy, ctx.name(node, "logits")), None]

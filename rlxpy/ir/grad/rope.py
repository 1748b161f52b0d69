"""Gradient rules of the rope family: Rope through the backward family's RopeBackward (the rotation
by -theta). The cos/sin tables and the position input are constants here: a loss that depends on a
differentiated tensor through them is refused. RopeKvAppend is an inference op (it appends to a KV
cache in place) and has no rule.
"""

from __future__ import annotations

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node


@vjp(ops.Rope)
def grad_rope(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    op: ops.Rope = node.op  # type: ignore[assignment]
    x, cos, sin, *position = ctx.inputs(node)
    if ctx.needs(node, 1) or ctx.needs(node, 2):
        raise UnsupportedOpError(f"{where(node)}: the loss depends on a differentiated tensor through the "
                                 "cos/sin tables, which have no gradient rule")
    dx = ctx.g.rope_backward(dy, cos, sin, op.head_dim, op.n_rot, op.interleaved, op.position_offset,
                             position[0] if position else None, ctx.name(node, "x"))
    return [dx, None, None] + [None] * len(position)

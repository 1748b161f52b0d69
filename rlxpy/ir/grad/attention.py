"""Gradient rules of the attention family: Attention through the backward family's
AttentionBackward: one node with ``wrt`` ALL when two or more of q, k, v need gradients (the softmax
statistics recomputed once, dK and dV in one pass; each gradient a view of its flat output), else one
node for the one that does.

A CUSTOM keep-mask and a BIAS mask are constants of the graph here: a loss that depends on a
differentiated tensor through the mask input is refused. KV-cache attention (``dynamic_kv``) is an
inference form and has no rule; PackedAttention exists only after the pattern pass.
"""

from __future__ import annotations

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.backward import AttentionWrt


@vjp(ops.Attention)
def grad_attention(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    op: ops.Attention = node.op  # type: ignore[assignment]
    if op.dynamic_kv:
        raise UnsupportedOpError(f"{where(node)}: KV-cache attention (dynamic_kv) has no gradient rule")
    q, k, v, *mask = ctx.inputs(node)
    if mask and ctx.needs(node, 3):
        raise UnsupportedOpError(f"{where(node)}: the loss depends on a differentiated tensor through the "
                                 f"{op.mask_kind.name} mask, which has no gradient rule")
    wanted = [ctx.needs(node, i) for i in range(3)]
    args = (op.num_heads, op.head_dim, op.num_kv_heads, op.mask_kind, mask[0] if mask else None,
            op.score_scale, op.softcap, op.window)
    if sum(wanted) >= 2:  # one node: the softmax statistics once, dK and dV in one pass
        flat = ctx.g.attention_backward(q, k, v, dy, AttentionWrt.ALL, *args, name=ctx.name(node, "all"))
        grads: list[Node | None] = []
        start = 0
        for index, x in enumerate((q, k, v)):
            part = ctx.g.narrow(flat, 0, start, x.numel)
            view = ctx.g.reshape(part, x.shape, ctx.name(node, "qkv"[index]))
            grads.append(view if wanted[index] else None)
            start += x.numel
        return grads + [None] * len(mask)
    grads = [ctx.g.attention_backward(q, k, v, dy, wrt, *args, name=ctx.name(node, "qkv"[index]))
             if wanted[index] else None
             for index, wrt in enumerate((AttentionWrt.QUERY, AttentionWrt.KEY, AttentionWrt.VALUE))]
    return grads + [None] * len(mask)

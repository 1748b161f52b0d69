"""Gradient rules of the attention family: Attention through the backward family's
AttentionBackward (one node per differentiated input, q, k or v, each recomputing the softmax).

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
    grads: list[Node | None] = []
    for index, wrt in enumerate((AttentionWrt.QUERY, AttentionWrt.KEY, AttentionWrt.VALUE)):
        if not ctx.needs(node, index):
            grads.append(None)
            continue
        grads.append(ctx.g.attention_backward(
            q, k, v, dy, wrt, op.num_heads, op.head_dim, op.num_kv_heads, op.mask_kind,
            mask[0] if mask else None, op.score_scale, op.softcap, op.window,
            name=ctx.name(node, "qkv"[index])))
    return grads + [None] * len(mask)

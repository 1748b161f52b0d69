"""Gradient rules of the attention family: Attention through the backward family's
AttentionBackward: one node with ``wrt`` ALL when two or more of q, k, v need gradients (the softmax
statistics recomputed once, dK and dV in one pass; each gradient a view of its flat output), else one
node for the one that does. When q, k and v are the column runs q | k | v of one fused projection's
output, the node is ``wrt`` PACKED: it writes the three side by side in that output's layout, so the
projection's gradient is the node itself (no concatenation). Every node gets the forward's output, from
which rowsum(dy * o) is read instead of recomputing dy v^T for it.

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
    named = {"output": node}  # rowsum(dy * o) from the forward's output instead of recomputed
    columns = _packed_columns(ctx, node) if all(wanted) else None
    if columns is not None:
        packed = ctx.g.attention_backward(q, k, v, dy, AttentionWrt.PACKED, *args, name=ctx.name(node, "qkv"),
                                          **named)
        return [ctx.g.narrow(packed, 2, start, width, ctx.name(node, part))
                for (start, width), part in zip(columns, "qkv")] + [None] * len(mask)
    if sum(wanted) >= 2:  # one node: the softmax statistics once, dK and dV in one pass
        flat = ctx.g.attention_backward(q, k, v, dy, AttentionWrt.ALL, *args, name=ctx.name(node, "all"),
                                        **named)
        grads: list[Node | None] = []
        start = 0
        for index, x in enumerate((q, k, v)):
            part = ctx.g.narrow(flat, 0, start, x.numel)
            view = ctx.g.reshape(part, x.shape, ctx.name(node, "qkv"[index]))
            grads.append(view if wanted[index] else None)
            start += x.numel
        return grads + [None] * len(mask)
    grads = [ctx.g.attention_backward(q, k, v, dy, wrt, *args, name=ctx.name(node, "qkv"[index]), **named)
             if wanted[index] else None
             for index, wrt in enumerate((AttentionWrt.QUERY, AttentionWrt.KEY, AttentionWrt.VALUE))]
    return grads + [None] * len(mask)


def _packed_columns(ctx: GradContext, node: Node) -> list[tuple[int, int]] | None:
    """(start, width) of q, k and v in their parent's rows when they are last-axis Narrows of one
    [B, S, W] tensor that they tile in order (a fused QKV projection cut into q | k | v), token-major
    ([B, S, H*D]); None otherwise. Their gradients are then one AttentionBackward PACKED, which the
    traversal hands to the parent whole (no concatenation)."""
    q, k, v = ctx.inputs(node)[:3]
    if any(not isinstance(t.op, ops.Narrow) or t.rank != 3 for t in (q, k, v)):
        return None
    parents = {t.inputs[0] for t in (q, k, v)}
    if len(parents) != 1:
        return None
    parent = ctx.g.nodes[parents.pop()]
    columns, at = [], 0
    for t in (q, k, v):
        if t.op.axis % 3 != 2 or t.op.start != at or t.shape[:2] != parent.shape[:2]:
            return None
        columns.append((at, t.shape[2]))
        at += t.shape[2]
    return columns if at == parent.shape[2] else None

"""Unfuse expansions of DotGeneral, LoraMatMul, FusedSwiGLU and the transformer blocks."""

from __future__ import annotations

import math

import numpy as np

from rlxpy.errors import GraphError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import ActKind, BinaryOp, MaskKind
from rlxpy.ir.passes.unfuse import Unfuser, expands
from rlxpy.ir.shape import Dim, Sym, format_shape


def _product(dims: list[Dim], node: Node, what: str) -> Dim:
    """Size of a flattened group of dims; a symbol is fine when it is the group's only dim > 1."""
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)  # type: ignore[arg-type]
    big = [d for d in dims if d != 1]
    if len(big) == 1 and isinstance(big[0], Sym):
        return big[0]
    raise GraphError(f"{where(node)}: cannot flatten {what} dims {format_shape(tuple(dims))} with symbols; "
                     "bind the dynamic dims before unfusing")


@expands(ops.DotGeneral)
def expand_dot_general(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    """lhs -> [batch, free, contracting], rhs -> [batch, contracting, free] (Transposes only when
    not the identity), flattened to [M,K]x[K,N] or [B,M,K]x[B,K,N], MatMul, Reshape to the output."""
    op: ops.DotGeneral = node.op  # type: ignore[assignment]
    lhs, rhs = args
    lhs_free, rhs_free = op.free_dims(lhs.rank, rhs.rank)
    lhs_t = unfuser.transpose(lhs, op.lhs_batch + tuple(lhs_free) + op.lhs_contracting, f"{name}/lhs_t")
    rhs_t = unfuser.transpose(rhs, op.rhs_batch + op.rhs_contracting + tuple(rhs_free), f"{name}/rhs_t")
    rows = _product([lhs.shape[d] for d in lhs_free], node, "lhs free")
    inner = _product([lhs.shape[d] for d in op.lhs_contracting], node, "contracting")
    cols = _product([rhs.shape[d] for d in rhs_free], node, "rhs free")
    batch = (_product([lhs.shape[d] for d in op.lhs_batch], node, "batch"),) if op.lhs_batch else ()
    lhs_m = unfuser.reshape(lhs_t, batch + (rows, inner), f"{name}/lhs_m")
    rhs_m = unfuser.reshape(rhs_t, batch + (inner, cols), f"{name}/rhs_m")
    if batch + (rows, cols) == tuple(node.shape):
        return unfuser.emit(ops.MatMul(), [lhs_m, rhs_m], name, exact=True)
    product = unfuser.emit(ops.MatMul(), [lhs_m, rhs_m], f"{name}/matmul")
    return unfuser.reshape(product, node.shape, name, exact=True)


@expands(ops.LoraMatMul)
def expand_lora(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    """``x@w`` + scale (a scalar Constant, broadcast by Expand) · ``(x@a)@b``."""
    op: ops.LoraMatMul = node.op  # type: ignore[assignment]
    x, w, a, b = args
    base = unfuser.emit(ops.MatMul(), [x, w], f"{name}/base")
    down = unfuser.emit(ops.MatMul(), [x, a], f"{name}/down")
    up = unfuser.emit(ops.MatMul(), [down, b], f"{name}/up")
    scale = unfuser.constant(np.array(op.scale), x.dtype, f"{name}/scale")
    scaled = unfuser.emit(ops.Binary(BinaryOp.MUL), [up, scale], f"{name}/scaled")
    return unfuser.emit(ops.Binary(BinaryOp.ADD), [base, scaled], name, exact=True)


@expands(ops.FusedSwiGLU)
def expand_swiglu(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    """Two last-axis Narrows, ``up * Silu(gate)``, then Cast when cast_to changes the dtype;
    gate_first picks which half is the gate."""
    op: ops.FusedSwiGLU = node.op  # type: ignore[assignment]
    (x,) = args
    axis, half = x.rank - 1, x.shape[-1] // 2  # type: ignore[operator]
    first_role, second_role = ("gate", "up") if op.gate_first else ("up", "gate")
    halves = {first_role: unfuser.emit(ops.Narrow(axis, 0, half), [x], f"{name}/{first_role}"),
              second_role: unfuser.emit(ops.Narrow(axis, half, half), [x], f"{name}/{second_role}")}
    silu = unfuser.emit(ops.Activation(ActKind.SILU), [halves["gate"]], f"{name}/silu")
    cast = op.cast_to is not None and op.cast_to != x.dtype
    product = unfuser.emit(ops.Binary(BinaryOp.MUL), [halves["up"], silu], f"{name}/mul" if cast else name,
                           exact=not cast)
    return unfuser.emit(ops.Cast(op.cast_to), [product], name, exact=True) if cast else product  # type: ignore


def _projection(unfuser: Unfuser, x: Node, w: Node, bias: Node | None, name: str,
                exact: bool = False) -> Node:
    """``x @ w (+ bias)``: FusedMatMulBiasAct with a bias, a plain MatMul without."""
    if bias is not None:
        return unfuser.emit(ops.FusedMatMulBiasAct(None), [x, w, bias], name, exact)
    return unfuser.emit(ops.MatMul(), [x, w], name, exact)


def _self_attention(unfuser: Unfuser, name: str, hidden: Node, qkv_w: Node, mask: Node, heads: int,
                    head_dim: int, qkv_b: Node | None = None, cos: Node | None = None,
                    sin: Node | None = None) -> Node:
    """QKV projection, three last-axis Narrows of width H·D, optional RoPE, rank-3 Attention
    (CUSTOM keep-mask) -> the concatenated heads [B, S, H·D]. Everything stays [B, S, H·D]:
    rlxpy's Rope rotates each head of such a row and Attention reads it with strides, so no
    [B,S,H,D] -> [B,H,S,D] transposes are needed around RoPE."""
    qkv = _projection(unfuser, hidden, qkv_w, qkv_b, f"{name}/qkv")
    width = heads * head_dim
    q, k, v = (unfuser.emit(ops.Narrow(2, i * width, width), [qkv], f"{name}/{part}")
               for i, part in enumerate("qkv"))
    if cos is not None and sin is not None:
        q = unfuser.emit(ops.Rope(head_dim), [q, cos, sin], f"{name}/q_rope")
        k = unfuser.emit(ops.Rope(head_dim), [k, cos, sin], f"{name}/k_rope")
    attention = ops.Attention(heads, head_dim, mask_kind=MaskKind.CUSTOM)
    return unfuser.emit(attention, [q, k, v, mask], f"{name}/attention")


@expands(ops.FusedAttentionBlock)
def expand_attention_block(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    op: ops.FusedAttentionBlock = node.op  # type: ignore[assignment]
    hidden, qkv_w, out_w, mask = args[:4]
    rest = list(args[4:])
    qkv_b, out_b = (rest.pop(0), rest.pop(0)) if op.has_bias else (None, None)
    cos, sin = rest if op.has_rope else (None, None)
    context = _self_attention(unfuser, name, hidden, qkv_w, mask, op.num_heads, op.head_dim, qkv_b, cos, sin)
    return _projection(unfuser, context, out_w, out_b, name, exact=True)


@expands(ops.FusedTransformerLayer)
def expand_transformer_layer(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    """Attention -> out proj -> FusedResidualLN(attn, hidden) -> fc1 + activation -> fc2 ->
    FusedResidualLN(ffn, h1). The out/fc2 biases ride in the FusedResidualLN's bias input."""
    op: ops.FusedTransformerLayer = node.op  # type: ignore[assignment]
    t = dict(zip(op.input_names(), args))
    context = _self_attention(unfuser, name, t["hidden"], t["qkv_w"], t["mask"], op.num_heads, op.head_dim,
                              t.get("qkv_b"))
    attn = unfuser.emit(ops.MatMul(), [context, t["out_w"]], f"{name}/attn_out")
    out_bias = [t["out_b"]] if op.has_bias else []
    h1 = unfuser.emit(ops.FusedResidualLN(op.has_bias, op.eps1),
                      [attn, t["hidden"], *out_bias, t["ln1_g"], t["ln1_b"]], f"{name}/ln1")
    if op.has_bias:
        fc1 = ops.FusedMatMulBiasAct(op.activation)
        inner = unfuser.emit(fc1, [h1, t["fc1_w"], t["fc1_b"]], f"{name}/fc1")
    else:
        inner = unfuser.emit(ops.MatMul(), [h1, t["fc1_w"]], f"{name}/fc1")
        inner = unfuser.emit(ops.Activation(op.activation), [inner], f"{name}/act")
    ffn = unfuser.emit(ops.MatMul(), [inner, t["fc2_w"]], f"{name}/fc2")
    fc2_bias = [t["fc2_b"]] if op.has_bias else []
    return unfuser.emit(ops.FusedResidualLN(op.has_bias, op.eps2),
                        [ffn, h1, *fc2_bias, t["ln2_g"], t["ln2_b"]], name, exact=True)

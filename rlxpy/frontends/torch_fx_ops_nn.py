"""The aten op table, part two: reductions, softmax, norms, matrix products and attention.

Same conventions as torch_fx_ops.py (torch's semantics, UnsupportedOpError where rlxpy has no exact
equivalent). torch's SDPA maps onto one rlxpy Attention op: a bool mask is a keep-mask, a float mask
an additive bias, and [B, S, H, D] tensors that were transposed for SDPA go in untransposed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from rlxpy.frontends.torch_fx_translate import Dim, FxTranslator, normalize_dims, translator
from rlxpy.ir import DType, Node, ops
from rlxpy.ir.ops.base import MaskKind, ReduceOp

T = FxTranslator
Args = dict[str, Any]


# -- reductions, softmax, norms ------------------------------------------------------------------
def _reduce(t: T, node: fx.Node, x: Any, dims: Any, keepdim: bool, kind: ReduceOp) -> Node:
    x = t.tensor(x)
    axes = normalize_dims(dims, x.rank)
    if x.rank == 0:
        return t.cast(x, t.out_dtype(node))
    if axes != list(range(axes[0], axes[-1] + 1)):
        rest = [d for d in range(x.rank) if d not in axes]
        perm = rest + axes
        moved = t.g.transpose(x, perm)
        reduced = t.g.reduce(t.cast(moved, DType.F32), kind, list(range(len(rest), x.rank)), False)
        return t.cast(t.g.reshape(reduced, t.out_shape(node), name=node.name), t.out_dtype(node))
    reduced = t.g.reduce(t.cast(x, DType.F32), kind, axes, bool(keepdim), name=node.name)
    return t.cast(reduced, t.out_dtype(node))


@translator("sum")
def tr_sum(t: T, node: fx.Node, a: Args) -> Node:
    return _reduce(t, node, a["self"], a.get("dim"), a.get("keepdim", False), ReduceOp.SUM)


@translator("mean")
def tr_mean(t: T, node: fx.Node, a: Args) -> Node:
    return _reduce(t, node, a["self"], a.get("dim"), a.get("keepdim", False), ReduceOp.MEAN)


@translator("amax", "amin")
def tr_amax(t: T, node: fx.Node, a: Args) -> Node:
    kind = ReduceOp.MAX if node.target._schema.name.endswith("amax") else ReduceOp.MIN
    return _reduce(t, node, a["self"], a.get("dim"), a.get("keepdim", False), kind)


@translator("prod")
def tr_prod(t: T, node: fx.Node, a: Args) -> Node:
    return _reduce(t, node, a["self"], a.get("dim"), a.get("keepdim", False), ReduceOp.PROD)


@translator("any", "all")
def tr_any_all(t: T, node: fx.Node, a: Args) -> Node:
    x = t.g.compare(t.tensor(a["self"]), 0, "ne")
    kind = ReduceOp.MAX if node.target._schema.name.endswith("any") else ReduceOp.MIN
    dims = a.get("dim", a.get("dims"))
    reduced = _reduce(t, node, t.cast(x, DType.F32), dims, a.get("keepdim", False), kind)
    return t.g.compare(reduced, 0, "ne")


@translator("var", "var_mean", "std")
def tr_var(t: T, node: fx.Node, a: Args) -> Any:
    """(x - mean)^2 summed over dims / (n - correction), like torch.var; std = sqrt(var)."""
    x = t.tensor(a["self"], DType.F32)
    axes = normalize_dims(a.get("dim"), x.rank)
    correction = a.get("correction")
    correction = 1 if correction is None and a.get("unbiased", True) else (correction or 0)
    mean = t.g.mean(x, axes, keep_dim=True)
    centered = t.g.sub(x, mean)
    count = None
    for ax in axes:
        size = t.tensor(x.shape[ax], DType.F32)
        count = size if count is None else t.g.mul(count, size)
    total = t.g.sum(t.g.mul(centered, centered), axes, keep_dim=bool(a.get("keepdim")))
    var = t.g.div(total, t.g.maximum(t.g.sub(count, float(correction)), 0.0))
    key = node.target._schema.name.split("::")[-1]
    if key == "std":
        return t.g.activation(var, "sqrt", name=node.name)
    if key == "var_mean":
        return [var, mean if a.get("keepdim") else t.g.reshape(mean, t.shape(node.meta["val"][1]))]
    return var


@translator("_softmax", "softmax", "_safe_softmax")
def tr_softmax(t: T, node: fx.Node, a: Args) -> Node:
    x = t.tensor(a["self"], DType.F32)
    return t.g.softmax(x, a["dim"] % x.rank, name=node.name)


@translator("_log_softmax", "log_softmax")
def tr_log_softmax(t: T, node: fx.Node, a: Args) -> Node:
    """x - max - log(sum(exp(x - max))), as torch.log_softmax."""
    x = t.tensor(a["self"], DType.F32)
    axis = a["dim"] % x.rank
    shifted = t.g.sub(x, t.g.reduce(x, ReduceOp.MAX, [axis], True))
    lse = t.g.activation(t.g.sum(t.g.exp(shifted), axis, keep_dim=True), "log")
    return t.g.sub(shifted, lse, name=node.name)


def _norm_weights(t: T, normalized: list[int], weight: Any, bias: Any, width: int
                  ) -> tuple[Node, Node | None]:
    gamma = t.tensor(weight, DType.F32) if weight is not None \
        else t.constant(np.ones([width], np.float32), DType.F32)
    beta = t.tensor(bias, DType.F32) if bias is not None else None
    if len(normalized) > 1:
        gamma = t.g.reshape(gamma, [width])
        beta = t.g.reshape(beta, [width]) if beta is not None else None
    return gamma, beta


@translator("native_layer_norm", "layer_norm")
def tr_layer_norm(t: T, node: fx.Node, a: Args) -> Any:
    x = t.tensor(a["input"], DType.F32)
    normalized = list(a["normalized_shape"])
    width = math.prod(normalized)
    lead = list(x.shape[:x.rank - len(normalized)])
    flat = t.g.reshape(x, lead + [width]) if len(normalized) > 1 else x
    gamma, beta = _norm_weights(t, normalized, a["weight"], a["bias"], width)
    y = t.g.layer_norm(flat, gamma, beta, eps=float(a["eps"]))
    y = t.g.reshape(y, x.shape, name=node.name) if len(normalized) > 1 else y
    if not node.target._schema.name.endswith("native_layer_norm"):
        return y
    users = {u.args[1] for u in node.users if u.target.__name__ == "getitem"} if node.users else set()
    if not users & {1, 2}:
        return [y, None, None]
    mean = t.g.mean(flat, -1, keep_dim=True)
    centered = t.g.sub(flat, mean)
    var = t.g.mean(t.g.mul(centered, centered), -1, keep_dim=True)
    rstd = t.g.activation(t.g.add(var, float(a["eps"])), "rsqrt")
    stats_shape = lead + [1] * len(normalized)
    return [y, t.g.reshape(mean, stats_shape), t.g.reshape(rstd, stats_shape)]


@translator("_fused_rms_norm", "rms_norm")
def tr_rms_norm(t: T, node: fx.Node, a: Args) -> Any:
    x = t.tensor(a["input"], DType.F32)
    normalized = list(a["normalized_shape"])
    if len(normalized) != 1:
        raise t.unsupported("rms_norm over several dims")
    eps = a["eps"]
    if eps is None:
        eps = float(torch.finfo(torch.float32).eps)  # torch's default for rms_norm
    gamma, _ = _norm_weights(t, normalized, a["weight"], None, normalized[0])
    y = t.g.rms_norm(x, gamma, eps=float(eps), name=node.name)
    if node.target._schema.name.endswith("_fused_rms_norm"):
        if any(u.args[1] == 1 for u in node.users):
            raise t.unsupported("the rstd output of _fused_rms_norm")
        return [y, None]
    return y


# -- matrix products, attention ------------------------------------------------------------------
@translator("mm", "bmm")
def tr_mm(t: T, node: fx.Node, a: Args) -> Node:
    return t.g.matmul(t.tensor(a["self"], DType.F32), t.tensor(a["mat2"], DType.F32), name=node.name)


@translator("addmm")
def tr_addmm(t: T, node: fx.Node, a: Args) -> Node:
    """beta * bias + alpha * (mat1 @ mat2); a [N] bias with unit factors is one fused linear."""
    x, w = t.tensor(a["mat1"], DType.F32), t.tensor(a["mat2"], DType.F32)
    bias = t.tensor(a["self"], DType.F32)
    if a["beta"] == 1 and a["alpha"] == 1 and bias.rank == 1 and bias.shape[0] == w.shape[1]:
        return t.g.linear(x, w, bias, name=node.name)
    product = t.g.matmul(x, w)
    if a["alpha"] != 1:
        product = t.g.mul(product, float(a["alpha"]))
    if a["beta"] == 0:
        return product
    return t.g.add(product, bias if a["beta"] == 1 else t.g.mul(bias, float(a["beta"])), name=node.name)


@translator("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
            "_scaled_dot_product_cudnn_attention")
def tr_sdpa(t: T, node: fx.Node, a: Args) -> Any:
    """torch's SDPA: q/k/v [B, H, S, D]; a bool mask keeps True, a float mask is added to the scores.
    The CPU kernel's logsumexp output (which training saves for the backward) is computed when read."""
    q, k, v = (t.tensor(a[n], DType.F32) for n in ("query", "key", "value"))
    if q.rank != 4 or k.rank != 4 or v.rank != 4:
        raise t.unsupported(f"attention on rank {q.rank} tensors (rlxpy takes [B, H, S, D])")
    heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[3]
    # [B, S, H, D] tensors transposed for SDPA go in as they are (the kernel reads that layout)
    q_in, k_in, v_in = (unswap_heads(t, x, x.shape[1]) for x in (q, k, v))
    bshd = q_in is not q
    if not all(isinstance(d, int) for d in (heads, kv_heads, head_dim)) or v.shape[3] != head_dim:
        raise t.unsupported(f"attention needs static heads and one head dim (q {q.shape}, v {v.shape})")
    if a.get("dropout_p"):
        raise t.unsupported("attention dropout")
    kind, mask_node = sdpa_mask(t, a, q, k)
    if bshd and (k_in is k or v_in is v):
        q_in, bshd = q, False  # one layout for q and k/v keeps the output [B, H, S, D]
    if not bshd:
        k_in, v_in = k, v
    out = t.g.attention(q_in, k_in, v_in, heads, head_dim, num_kv_heads=kv_heads, mask_kind=kind,
                        mask=mask_node, score_scale=a.get("scale"), name=node.name)
    if bshd:  # back to SDPA's [B, H, S, D]; the usual transpose that follows cancels it
        out = t.g.transpose(out, [0, 2, 1, 3])
    if node.target._schema.name.endswith("scaled_dot_product_attention"):
        return out
    used = {u.args[1] for u in node.users}
    cpu = node.target._schema.name.endswith("_for_cpu")
    if used - {0, 1} or 1 in used and not cpu:
        raise t.unsupported("attention statistics outputs (logsumexp of the CUDA kernels, seeds)")
    stats = _logsumexp(t, node, q, k, kind, mask_node, a.get("scale")) if 1 in used else None
    return [out, stats] + [None] * (len(node.meta["val"]) - 2)


def sdpa_mask(t: T, a: Args, q: Node, k: Node) -> tuple[MaskKind, Node | None]:
    """SDPA's is_causal / attn_mask as an rlxpy mask kind and mask: a bool mask is CUSTOM (keep True),
    a float one BIAS (added, -inf kept finite)."""
    mask = a.get("attn_mask", a.get("attn_bias"))
    kind, mask_node = MaskKind.NONE, None
    if a.get("is_causal"):
        if q.shape[2] != k.shape[2]:
            raise t.unsupported("is_causal with S_q != S_k (torch aligns the mask top-left, rlxpy "
                                "bottom-right)")
        kind = MaskKind.CAUSAL
    if mask is not None:
        if kind is MaskKind.CAUSAL:
            raise t.unsupported("attention with both is_causal and a mask")
        mask_node = t.tensor(mask)
        if mask_node.rank < 4:
            mask_node = t.g.reshape(mask_node, [1] * (4 - mask_node.rank) + list(mask_node.shape))
        if mask_node.dtype is DType.BOOL:
            kind, mask_node = MaskKind.CUSTOM, t.cast(mask_node, DType.F32)
        else:
            kind = MaskKind.BIAS
            mask_node = t.g.maximum(t.cast(mask_node, DType.F32), -3.0e38)  # -inf rows stay finite in kernels
    return kind, mask_node


def _logsumexp(t: T, node: fx.Node, q: Node, k: Node, kind: MaskKind, mask: Node | None,
               scale: float | None) -> Node:
    """[B, H, S_q]: log sum_j exp(masked scaled score ij), as torch's CPU attention returns it (the
    scores are materialised: only a graph that saves them for the backward reads this). Its nodes are
    named after ``node`` (an automatic name like where_1 could be an FX node's)."""
    if k.shape[1] != q.shape[1]:
        raise t.unsupported("the logsumexp of grouped-query attention")
    scale = scale if scale is not None else 1 / math.sqrt(q.shape[3])
    scores = t.g.mul(t.g.matmul(q, t.g.transpose(k, [0, 1, 3, 2])), float(scale))
    low = t.constant(-math.inf, DType.F32)
    if kind is MaskKind.CAUSAL:
        rows = t.g.reshape(t.iota(q.shape[2]), [q.shape[2], 1])
        cols = t.g.reshape(t.iota(k.shape[2]), [1, k.shape[2]])
        scores = t.g.where(t.g.compare(cols, rows, "gt"), low, scores, name=f"{node.name}.lse_causal")
    elif kind is MaskKind.CUSTOM:
        scores = t.g.where(t.g.compare(mask, 0.0, "ne"), scores, low, name=f"{node.name}.lse_masked")
    elif kind is MaskKind.BIAS:
        scores = t.g.add(scores, mask)
    top = t.g.reduce(scores, ReduceOp.MAX, [3], True)
    total = t.g.sum(t.g.exp(t.g.sub(scores, top)), 3, keep_dim=True)
    return t.g.reshape(t.g.add(t.g.activation(total, "log"), top), list(q.shape[:3]))


def unswap_heads(t: T, x: Node, heads: Dim) -> Node:
    """x's [B, S, H, D] source when x = transpose(source, 1, 2) and the source's layout cannot be
    mistaken for [B, H, S, D] (S is not statically equal to H); else x itself."""
    if not isinstance(x.op, ops.Transpose) or tuple(x.op.perm) != (0, 2, 1, 3):
        return x
    source = t.g[x.inputs[0]]
    return source if source.shape[1] != heads else x

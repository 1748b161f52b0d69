"""Reference semantics: matmuls, norms, attention, rotary embedding, sampling, quantised ops."""

from __future__ import annotations

import numpy as np

from rlxpy.errors import InputError, where
from rlxpy.ir import ops
from rlxpy.ir.ops.attention import attention_layout
from rlxpy.ir.ops.core import MaskKind
from rlxpy.ir.reference import reference
from rlxpy.ir.reference.core import apply_activation, clamp_indices


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@reference(ops.MatMul)
def ref_matmul(op, args, node):
    a, b = args
    return np.matmul(_f64(a), _f64(b)).astype(a.dtype)


@reference(ops.FusedMatMulBiasAct)
def ref_fused_matmul(op: ops.FusedMatMulBiasAct, args, node):
    x, w, bias = args
    y = (np.matmul(_f64(x), _f64(w)) + _f64(bias)).astype(x.dtype)
    return apply_activation(op.activation, y) if op.activation is not None else y


@reference(ops.GroupedMatMul)
def ref_grouped_matmul(op, args, node):
    x, w, idx = args
    out = np.zeros(node.shape, dtype=np.float64)
    experts = np.trunc(idx.astype(np.float64)).astype(np.int64)
    for row, e in enumerate(experts):
        if 0 <= e < w.shape[0]:
            out[row] = _f64(x[row]) @ _f64(w[e])
    return out.astype(x.dtype)


def layer_norm(x: np.ndarray, gamma, beta, eps: float) -> np.ndarray:
    x64 = _f64(x)
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + eps) * _f64(gamma)
    return (y + _f64(beta) if beta is not None else y).astype(x.dtype)


def rms_norm(x: np.ndarray, gamma, beta, eps: float) -> np.ndarray:
    x64 = _f64(x)
    y = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * _f64(gamma)
    return (y + _f64(beta) if beta is not None else y).astype(x.dtype)


@reference(ops.LayerNorm)
def ref_layer_norm(op: ops.LayerNorm, args, node):
    return layer_norm(args[0], args[1], args[2] if len(args) > 2 else None, op.eps)


@reference(ops.RmsNorm)
def ref_rms_norm(op: ops.RmsNorm, args, node):
    return rms_norm(args[0], args[1], args[2] if len(args) > 2 else None, op.eps)


def _residual_sum(has_bias: bool, args) -> np.ndarray:
    total = _f64(args[0]) + _f64(args[1])
    return (total + _f64(args[2]) if has_bias else total).astype(args[0].dtype)


@reference(ops.FusedResidualLN)
def ref_residual_ln(op: ops.FusedResidualLN, args, node):
    return layer_norm(_residual_sum(op.has_bias, args), args[-2], args[-1], op.eps)


@reference(ops.FusedResidualRmsNorm)
def ref_residual_rms(op: ops.FusedResidualRmsNorm, args, node):
    return rms_norm(_residual_sum(op.has_bias, args), args[-2], args[-1], op.eps)


def to_bhsd(t: np.ndarray, layout: str, heads: int, head_dim: int) -> np.ndarray:
    if layout == "bhsd":
        return t
    if layout == "bshd":
        return t.transpose(0, 2, 1, 3)
    if layout == "bs(hd)":
        b, s, _ = t.shape
        return t.reshape(b, s, heads, head_dim).transpose(0, 2, 1, 3)
    bh, s, d = t.shape  # "hsd": [B*H, S, D]
    return t.reshape(bh // heads, heads, s, d)


def from_bhsd(t: np.ndarray, layout: str, shape) -> np.ndarray:
    if layout == "bhsd":
        return t
    if layout == "bshd":
        return t.transpose(0, 2, 1, 3)
    if layout == "bs(hd)":
        return t.transpose(0, 2, 1, 3).reshape(shape)
    return t.reshape(shape)


def attention_mask(kind: MaskKind, s_q: int, s_k: int, window: int) -> np.ndarray:
    """Boolean keep-mask [S_q, S_k] for causal kinds, bottom-right aligned."""
    pos = np.arange(s_q)[:, None] + (s_k - s_q)
    keys = np.arange(s_k)[None, :]
    keep = keys <= pos
    if kind is MaskKind.SLIDING_WINDOW:
        keep &= keys >= pos - window
    return keep


@reference(ops.Attention)
def ref_attention(op: ops.Attention, args, node):
    q, k, v = args[:3]
    if op.dynamic_kv:  # keys [0, pos + S_q) exist; causal alignment uses that length
        q_layout = attention_layout(ops.TensorType(q.shape, node.dtype), op.num_heads, op.head_dim)
        kv_layout = attention_layout(ops.TensorType(k.shape, node.dtype), op.kv_heads, op.head_dim)
        s_q = q.shape[2] if q_layout == "bhsd" else q.shape[1]
        kv_axis = 2 if kv_layout == "bhsd" else 1
        keep = np.arange(min(int(args[-1][0]) + s_q, k.shape[kv_axis]))
        k, v = np.take(k, keep, axis=kv_axis), np.take(v, keep, axis=kv_axis)
        args = list(args[:-1])
    heads, kv_heads, d = op.num_heads, op.kv_heads, op.head_dim
    lq = attention_layout(node.type, heads, d) if q.ndim == 4 else attention_layout(
        ops.TensorType(q.shape, node.dtype), heads, d)
    lk = attention_layout(ops.TensorType(k.shape, node.dtype), kv_heads, d)
    qb = _f64(to_bhsd(q, lq, heads, d))
    kb = _f64(to_bhsd(k, lk, kv_heads, d))
    vb = _f64(to_bhsd(v, lk, kv_heads, d))
    group = heads // kv_heads
    kb = np.repeat(kb, group, axis=1)
    vb = np.repeat(vb, group, axis=1)
    scale = op.score_scale if op.score_scale is not None else 1.0 / np.sqrt(d)
    scores = np.einsum("bhqd,bhkd->bhqk", qb, kb) * scale
    if op.softcap:
        scores = op.softcap * np.tanh(scores / op.softcap)
    s_q, s_k = scores.shape[-2:]
    if op.mask_kind in (MaskKind.CAUSAL, MaskKind.SLIDING_WINDOW):
        scores = np.where(attention_mask(op.mask_kind, s_q, s_k, op.window), scores, -3.4e38)
    elif op.mask_kind is MaskKind.CUSTOM:
        scores = np.where(_mask_bhqk(args[3], scores.shape) < 0.5, -1e9, scores)
    elif op.mask_kind is MaskKind.BIAS:
        scores = scores + _mask_bhqk(_f64(args[3]), scores.shape)
    scores = scores - scores.max(-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bhkd->bhqd", p, vb)
    return from_bhsd(out, lq, q.shape).astype(q.dtype)


def _mask_bhqk(mask: np.ndarray, shape) -> np.ndarray:
    """Masks [B,S_k], [B,S_q,S_k] or [B,H,S_q,S_k] broadcast to [B,H,S_q,S_k]."""
    b, _, s_q, s_k = shape
    if mask.ndim == 2:
        mask = mask[:, None, None, :]
    elif mask.ndim == 3:
        mask = mask[:, None, :, :]
    return np.broadcast_to(mask, shape)


@reference(ops.Rope)
def ref_rope(op: ops.Rope, args, node):
    x, cos, sin = args[:3]
    offset = op.position_offset + (int(args[3][0]) if len(args) > 3 else 0)
    seq = x.shape[-2]
    if offset < 0 or offset + seq > cos.shape[0]:  # the position input is only known now
        raise InputError(f"{where(node)}: positions {offset}..{offset + seq - 1} exceed the "
                         f"{cos.shape[0]}-row cos/sin tables")
    heads = x.shape[-1] // op.head_dim
    half = op.rot // 2
    c = _f64(cos[offset: offset + seq])[:, None, :]  # [S, 1, half]
    s = _f64(sin[offset: offset + seq])[:, None, :]
    xh = _f64(x).reshape(x.shape[:-1] + (heads, op.head_dim))
    out = xh.copy()
    if op.interleaved:
        even, odd = xh[..., 0:op.rot:2], xh[..., 1:op.rot:2]
        out[..., 0:op.rot:2] = even * c - odd * s
        out[..., 1:op.rot:2] = odd * c + even * s
    else:
        first, second = xh[..., :half], xh[..., half:op.rot]
        out[..., :half] = first * c - second * s
        out[..., half:op.rot] = second * c + first * s
    return out.reshape(x.shape).astype(x.dtype)


# -- sampling --------------------------------------------------------------------------------
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_MASK32 = np.uint64(0xFFFFFFFF)


def threefry2x32(counter: tuple[np.ndarray, np.ndarray],
                 key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Threefry2x32 with 20 rounds (Random123), vectorised over the counters."""
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    ks = (k0, k1, np.uint64(0x1BD11BDA) ^ k0 ^ k1)
    x0 = (counter[0].astype(np.uint64) + ks[0]) & _MASK32
    x1 = (counter[1].astype(np.uint64) + ks[1]) & _MASK32
    for r in range(20):
        rot = np.uint64(_ROTATIONS[r % 8])
        x0 = (x0 + x1) & _MASK32
        x1 = ((x1 << rot) | (x1 >> (np.uint64(32) - rot))) & _MASK32
        x1 ^= x0
        if r % 4 == 3:
            inject = (r + 1) // 4
            x0 = (x0 + ks[inject % 3]) & _MASK32
            x1 = (x1 + ks[(inject + 1) % 3] + np.uint64(inject)) & _MASK32
    return x0.astype(np.uint32), x1.astype(np.uint32)


def sample_rows(logits: np.ndarray, temperature: float, top_k: int, top_p: float, seed: int) -> np.ndarray:
    """Token id per row; temperature 0 is greedy (argmax, ties -> lowest index)."""
    rows = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    if temperature == 0:
        return np.argmax(rows, axis=-1).astype(np.int32)
    z = rows / max(temperature, 1e-6)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    vocab = rows.shape[-1]
    if top_k > 0 or 0 < top_p < 1:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, -1)
        before = np.cumsum(sorted_p, -1) - sorted_p  # mass of strictly better tokens
        keep_sorted = np.ones_like(sorted_p, dtype=bool)
        if top_k > 0:
            keep_sorted &= np.arange(vocab)[None, :] < top_k
        if 0 < top_p < 1:
            keep_sorted &= before < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, -1)
        p = np.where(keep, p, 0.0)
        p /= np.maximum(p.sum(-1, keepdims=True), 1e-12)
    zero = np.zeros(1, np.uint32)
    key = threefry2x32((zero, zero), (seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF))
    row_ids, token_ids = np.meshgrid(np.arange(rows.shape[0]), np.arange(vocab), indexing="ij")
    bits, _ = threefry2x32((row_ids.ravel().astype(np.uint32), token_ids.ravel().astype(np.uint32)),
                           (int(key[0][0]), int(key[1][0])))
    u = (bits >> np.uint32(8)).astype(np.float64) / float(1 << 24)
    gumbel = -np.log(-np.log(np.maximum(u, 1e-30))).reshape(rows.shape)
    with np.errstate(divide="ignore"):
        score = np.where(p > 0, np.log(p) + gumbel, -np.inf)
    return np.argmax(score, axis=-1).astype(np.int32)


@reference(ops.Sample)
def ref_sample(op: ops.Sample, args, node):
    seed = op.seed
    if len(args) > 1:
        lo, hi = (int(v) & 0xFFFFFFFF for v in args[1])
        seed = lo | hi << 32
    return sample_rows(args[0], op.temperature, op.top_k, op.top_p, seed).reshape(node.shape)


# -- quantised ---------------------------------------------------------------------------------
def gguf_dequantize(raw: np.ndarray, qtype: str, rows: int, cols: int) -> np.ndarray:
    """Rows of GGML blocks -> f32 [rows, cols], via gguf-py (the independent decoder)."""
    from gguf import GGMLQuantizationType, quants

    values = quants.dequantize(np.ascontiguousarray(raw, dtype=np.uint8), GGMLQuantizationType[qtype])
    return np.asarray(values, dtype=np.float32).reshape(rows, cols)


@reference(ops.DequantMatMulGguf)
def ref_dequant_matmul_gguf(op: ops.DequantMatMulGguf, args, node):
    x, w = args
    weight = gguf_dequantize(w, op.qtype, op.n, op.k)
    return (_f64(x) @ _f64(weight).T).astype(np.float32)


@reference(ops.DequantGroupedMatMul)
def ref_dequant_grouped(op: ops.DequantGroupedMatMul, args, node):
    x, w, idx = args
    out = np.zeros(node.shape, dtype=np.float64)
    experts = np.trunc(idx.astype(np.float64)).astype(np.int64)
    for e in np.unique(experts):
        if 0 <= e < w.shape[0]:
            rows = experts == e
            out[rows] = _f64(x[rows]) @ _f64(gguf_dequantize(w[e], op.qtype, op.n, op.k)).T
    return out.astype(np.float32)


@reference(ops.GatherGguf)
def ref_gather_gguf(op: ops.GatherGguf, args, node):
    table, idx = args
    rows = clamp_indices(idx, table.shape[0]).ravel()
    values = gguf_dequantize(table[rows], op.qtype, len(rows), op.k)
    return values.reshape(node.shape)


@reference(ops.FusedGgufMatMul)
def ref_fused_gguf_matmul(op: ops.FusedGgufMatMul, args, node):
    by_role = dict(zip(op.input_roles(), args))
    h = by_role["x"]
    if op.eps > 0:
        h = rms_norm(h, by_role["gamma"], None, op.eps)
    y = _f64(h) @ _f64(gguf_dequantize(by_role["w"], op.qtype, op.n, op.k)).T
    if op.swiglu:
        up = _f64(h) @ _f64(gguf_dequantize(by_role["w_up"], op.qtype, op.n, op.k)).T
        y = (y / (1.0 + np.exp(-y))) * up
    if op.has_residual:
        y = y + _f64(by_role["residual"])
    if op.rope is not None:  # the QKV block rounds to f32 first, as the unfused graph's GEMV output does
        from rlxpy.ir.ops.quant import ROPE_ROLES
        from rlxpy.ir.reference.kv import ref_rope_kv_append

        return ref_rope_kv_append(op.rope, [y.astype(np.float32)] + [by_role[r] for r in ROPE_ROLES], node)
    return y.astype(np.float32)

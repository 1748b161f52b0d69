"""Reference semantics of the attention family: Attention, PackedAttention (through Attention's
reference), and the composites FusedAttentionBlock and FusedTransformerLayer, computed directly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.ops.attention import attention_layout
from rlxpy.ir.ops.base import MaskKind, TensorType
from rlxpy.ir.reference.core import reference
from rlxpy.ir.reference.elementwise import ACTIVATIONS


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


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
    if op.dynamic_kv and args[-1].shape[0] > 1:  # one pos per batch entry: each alone
        pos = args[-1]
        return np.concatenate([ref_attention(op, [q[b: b + 1], k[b: b + 1], v[b: b + 1],
                                                  *(a[b: b + 1] for a in args[3:-1]), pos[b: b + 1]], node)
                               for b in range(q.shape[0])], axis=0)
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
        scores = np.where(mask_bhqk(args[3], scores.shape) < 0.5, -1e9, scores)
    elif op.mask_kind is MaskKind.BIAS:
        scores = scores + mask_bhqk(_f64(args[3]), scores.shape)
    scores = scores - scores.max(-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bhkd->bhqd", p, vb)
    return from_bhsd(out, lq, q.shape).astype(q.dtype)


def mask_bhqk(mask: np.ndarray, shape) -> np.ndarray:
    """Masks [B,S_k], [B,S_q,S_k] or [B,H,S_q,S_k] broadcast to [B,H,S_q,S_k]."""
    b, _, s_q, s_k = shape
    if mask.ndim == 2:
        mask = mask[:, None, None, :]
    elif mask.ndim == 3:
        mask = mask[:, None, :, :]
    return np.broadcast_to(mask, shape)


@reference(ops.PackedAttention)
def ref_packed_attention(op: ops.PackedAttention, args, node):
    rows = args[0].reshape(op.batch, op.seq, op.row)
    q_width, kv_width = op.num_heads * op.head_dim, op.kv_heads * op.head_dim
    q = rows[..., op.q_col: op.q_col + q_width]
    k = rows[..., op.k_col: op.k_col + kv_width]
    v = rows[..., op.v_col: op.v_col + kv_width]
    unfused = SimpleNamespace(type=TensorType(q.shape, node.dtype), dtype=node.dtype)  # [B, S, H*D]
    return ref_attention(op.unpacked(), [q, k, v, *args[1:]], unfused)


# -- transformer blocks -------------------------------------------------------------------------
def _rotate_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x [B, H, S, D] with transformers' rotate_half: x·cos + rotate_half(x)·sin, tables [P, D/2]."""
    seq = x.shape[2]
    c = np.concatenate([cos[:seq], cos[:seq]], axis=-1)  # [S, D]
    s = np.concatenate([sin[:seq], sin[:seq]], axis=-1)
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * c + rotated * s


def _keep_mask(mask: np.ndarray, batch: int, heads: int, seq: int) -> np.ndarray:
    """True where a score is masked: [B,S] / [B,S,S] / [B,H,S,S] entries < 0.5, as [B,H,S,S]."""
    if mask.ndim == 2:
        mask = mask[:, None, None, :]
    elif mask.ndim == 3:
        mask = mask[:, None]
    return np.broadcast_to(mask < 0.5, (batch, heads, seq, seq))


def attention_block(hidden: np.ndarray, qkv_w, out_w, mask, heads: int, head_dim: int, qkv_b=None,
                    out_b=None, cos=None, sin=None) -> np.ndarray:
    """Self-attention over hidden [B, S, E] in float64 (see FusedAttentionBlock's docstring)."""
    batch, seq, _ = hidden.shape
    width = heads * head_dim
    qkv = _f64(hidden) @ _f64(qkv_w)
    if qkv_b is not None:
        qkv = qkv + _f64(qkv_b)
    q, k, v = (qkv[..., i * width:(i + 1) * width].reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)
               for i in range(3))
    if cos is not None:
        q, k = _rotate_half(q, _f64(cos), _f64(sin)), _rotate_half(k, _f64(cos), _f64(sin))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_dim)
    scores = np.where(_keep_mask(mask, batch, heads, seq), -1e9, scores)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, width)
    out = context @ _f64(out_w)
    return out + _f64(out_b) if out_b is not None else out


@reference(ops.FusedAttentionBlock)
def ref_attention_block(op: ops.FusedAttentionBlock, args, node):
    hidden, qkv_w, out_w, mask = args[:4]
    rest = list(args[4:])
    qkv_b, out_b = (rest.pop(0), rest.pop(0)) if op.has_bias else (None, None)
    cos, sin = rest if op.has_rope else (None, None)
    out = attention_block(hidden, qkv_w, out_w, mask, op.num_heads, op.head_dim, qkv_b, out_b, cos, sin)
    return out.astype(hidden.dtype)


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + eps) * _f64(gamma) + _f64(beta)


@reference(ops.FusedTransformerLayer)
def ref_transformer_layer(op: ops.FusedTransformerLayer, args, node):
    t = dict(zip(op.input_names(), args))
    hidden = _f64(t["hidden"])
    attn = attention_block(hidden, t["qkv_w"], t["out_w"], t["mask"], op.num_heads, op.head_dim,
                           t.get("qkv_b"), t.get("out_b"))
    h1 = _layer_norm(hidden + attn, t["ln1_g"], t["ln1_b"], op.eps1)
    inner = h1 @ _f64(t["fc1_w"])
    if "fc1_b" in t:
        inner = inner + _f64(t["fc1_b"])
    with np.errstate(all="ignore"):
        inner = ACTIVATIONS[op.activation](inner)
    ffn = inner @ _f64(t["fc2_w"])
    if "fc2_b" in t:
        ffn = ffn + _f64(t["fc2_b"])
    return _layer_norm(h1 + ffn, t["ln2_g"], t["ln2_b"], op.eps2).astype(t["hidden"].dtype)

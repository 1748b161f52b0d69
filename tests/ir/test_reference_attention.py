"""The numpy reference of Attention against torch's scaled_dot_product_attention: layouts,
GQA, masks, bias, score scale, softcap, dynamic KV length."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reference_helpers import close_loose as close
from reference_helpers import rand_plain as rand
from reference_helpers import run, t

from rlxpy.ir.ops import Attention, MaskKind

# -- attention ---------------------------------------------------------------------------------------
LAYOUTS = ["bhsd", "bshd", "bs(hd)", "hsd"]


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """[B, H, S, D] -> the named layout."""
    b, h, s, d = x.shape
    layouts = {"bhsd": x, "bshd": x.transpose(0, 2, 1, 3),
               "bs(hd)": x.transpose(0, 2, 1, 3).reshape(b, s, h * d), "hsd": x.reshape(b * h, s, d)}
    return layouts[layout].copy()


def from_layout(y: np.ndarray, layout: str, b: int, h: int) -> np.ndarray:
    """The named layout -> [B, H, S, D]."""
    if layout == "bhsd":
        return y
    if layout == "bshd":
        return y.transpose(0, 2, 1, 3)
    if layout == "bs(hd)":
        return y.reshape(b, y.shape[1], h, -1).transpose(0, 2, 1, 3)
    return y.reshape(b, h, y.shape[1], y.shape[2])


def attention(q, k, v, mask=None, **attrs) -> np.ndarray:
    """Run one Attention node. (Graph.attention calls self.add; build the op with apply.)"""
    arrays = dict(q=q, k=k, v=v) | ({"mask": mask} if mask is not None else {})
    return run(lambda g, *xs: g.apply(Attention(**attrs), list(xs), "attn"), **arrays)


def keep_mask(kind: MaskKind, s_q: int, s_k: int, window: int = 0) -> torch.Tensor:
    """Bottom-right aligned keep-mask, built by hand: query i sits at absolute position S_k - S_q + i."""
    position = torch.arange(s_q)[:, None] + (s_k - s_q)
    keys = torch.arange(s_k)[None, :]
    keep = keys <= position
    if kind is MaskKind.SLIDING_WINDOW:
        keep = keep & (keys >= position - window)
    return keep


def qkv(b, heads, kv_heads, s_q, s_k, d, seed=0):
    kv_shape = (b, kv_heads, s_k, d)
    return rand((b, heads, s_q, d), seed), rand(kv_shape, seed + 1), rand(kv_shape, seed + 2)


def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, **kwargs) -> torch.Tensor:
    """torch's scaled_dot_product_attention in f64 on [B, H, S, D] arrays."""
    return F.scaled_dot_product_attention(t(q).double(), t(k).double(), t(v).double(), **kwargs)


@pytest.mark.parametrize("ratio", [1, 3, 8])
@pytest.mark.parametrize("mask", ["none", "causal", "causal_decode"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_attention_matches_sdpa(layout, mask, ratio):
    kv_heads, d = 2, 8
    heads = kv_heads * ratio
    s_k = 17
    s_q = 5 if mask == "causal_decode" else 17  # S_q < S_k: causal is bottom-right aligned
    q, k, v = qkv(2, heads, kv_heads, s_q, s_k, d, seed=ratio)
    kind = MaskKind.NONE if mask == "none" else MaskKind.CAUSAL
    out = attention(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout),
                    num_heads=heads, head_dim=d, num_kv_heads=kv_heads, mask_kind=kind)
    attn_mask = keep_mask(kind, s_q, s_k) if kind is MaskKind.CAUSAL else None
    close(from_layout(out, layout, 2, heads), sdpa(q, k, v, attn_mask=attn_mask, enable_gqa=True))


@pytest.mark.parametrize("ratio", [1, 3, 8])
def test_attention_gqa_equals_repeat_interleave_of_kv_heads(ratio):
    q, k, v = qkv(1, 3 * ratio, 3, 3, 17, 4, seed=30)
    out = attention(q, k, v, num_heads=3 * ratio, head_dim=4, num_kv_heads=3)
    k_rep, v_rep = (t(a).double().repeat_interleave(ratio, dim=1) for a in (k, v))
    close(out, F.scaled_dot_product_attention(t(q).double(), k_rep, v_rep))


def test_attention_with_q_bshd_and_kv_bhsd_mixed():
    q, k, v = qkv(2, 4, 4, 3, 17, 8, seed=31)
    out = attention(to_layout(q, "bshd"), k, v, num_heads=4, head_dim=8)
    close(from_layout(out, "bshd", 2, 4), sdpa(q, k, v))


@pytest.mark.parametrize("s_q,s_k,d", [(1, 1, 1), (1, 255, 3), (3, 17, 17), (255, 255, 3)])
def test_attention_odd_sizes_causal(s_q, s_k, d):
    q, k, v = qkv(1, 2, 2, s_q, s_k, d, seed=32)
    out = attention(q, k, v, num_heads=2, head_dim=d, mask_kind=MaskKind.CAUSAL)
    close(out, sdpa(q, k, v, attn_mask=keep_mask(MaskKind.CAUSAL, s_q, s_k)))


@pytest.mark.parametrize("s_q,s_k,window", [(17, 17, 0), (17, 17, 4), (5, 17, 3), (1, 17, 16), (3, 17, 100)])
def test_attention_sliding_window(s_q, s_k, window):
    q, k, v = qkv(2, 2, 2, s_q, s_k, 8, seed=33)
    out = attention(q, k, v, num_heads=2, head_dim=8, mask_kind=MaskKind.SLIDING_WINDOW, window=window)
    mask = keep_mask(MaskKind.SLIDING_WINDOW, s_q, s_k, window)
    assert mask.sum(-1).max() == min(window + 1, s_k)  # w + 1 visible keys at most
    close(out, sdpa(q, k, v, attn_mask=mask))


@pytest.mark.parametrize("mask_rank", [2, 3, 4])
def test_attention_custom_keep_mask(mask_rank):
    b, h, s_q, s_k = 2, 3, 5, 17
    q, k, v = qkv(b, h, h, s_q, s_k, 8, seed=34)
    shape = {2: (b, s_k), 3: (b, s_q, s_k), 4: (b, h, s_q, s_k)}[mask_rank]
    mask = np.random.default_rng(35).random(shape).astype(np.float32)
    mask[..., 0] = 1.0  # no fully masked row: torch's SDPA returns zeros there, the IR a uniform mean
    out = attention(q, k, v, mask, num_heads=h, head_dim=8, mask_kind=MaskKind.CUSTOM)
    keep = t(mask >= 0.5)
    keep = {2: keep[:, None, None, :], 3: keep[:, None], 4: keep}[mask_rank]
    close(out, sdpa(q, k, v, attn_mask=keep))


def test_attention_fully_masked_row_averages_v():
    q, k, v = qkv(1, 2, 2, 3, 17, 8, seed=36)
    mask = np.ones((1, 3, 17), np.float32)
    mask[0, 1] = 0.0  # query row 1 sees nothing
    out = attention(q, k, v, mask, num_heads=2, head_dim=8, mask_kind=MaskKind.CUSTOM)
    close(out[:, :, 1], v.mean(axis=2))
    # causal with S_q > S_k: the first rows precede every key and average V too
    q2, k2, v2 = qkv(1, 2, 2, 5, 3, 8, seed=37)
    out2 = attention(q2, k2, v2, num_heads=2, head_dim=8, mask_kind=MaskKind.CAUSAL)
    close(out2[:, :, 0], v2.mean(axis=2))
    close(out2[:, :, 1], v2.mean(axis=2))


@pytest.mark.parametrize("bias_rank", [3, 4])
def test_attention_additive_bias(bias_rank):
    b, h, s_q, s_k = 2, 3, 5, 17
    q, k, v = qkv(b, h, h, s_q, s_k, 8, seed=38)
    bias = rand((b, h, s_q, s_k) if bias_rank == 4 else (b, s_q, s_k), 39, 2.0)
    bias[..., 3] = -np.inf  # additive -inf masks a key, like torch's float attn_mask
    out = attention(q, k, v, bias, num_heads=h, head_dim=8, mask_kind=MaskKind.BIAS)
    torch_bias = t(bias).double() if bias_rank == 4 else t(bias).double()[:, None]
    close(out, sdpa(q, k, v, attn_mask=torch_bias))


def test_attention_score_scale():
    q, k, v = qkv(1, 4, 2, 3, 17, 8, seed=40)
    out = attention(q, k, v, num_heads=4, head_dim=8, num_kv_heads=2, score_scale=0.7)
    close(out, sdpa(q, k, v, scale=0.7, enable_gqa=True))


def _manual_attention(q, k, v, scale, softcap, keep):
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~keep, float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, -1), v)


@pytest.mark.parametrize("softcap", [0.5, 5.0, 50.0])
def test_attention_softcap_before_causal_mask(softcap):
    q, k, v = qkv(2, 2, 2, 5, 17, 8, seed=41)
    q = q * 4  # large scores, so the cap matters
    out = attention(q, k, v, num_heads=2, head_dim=8, mask_kind=MaskKind.CAUSAL, softcap=softcap,
                    score_scale=0.25)
    expected = _manual_attention(t(q).double(), t(k).double(), t(v).double(), 0.25, softcap,
                                 keep_mask(MaskKind.CAUSAL, 5, 17))
    close(out, expected)


@pytest.mark.parametrize("layout", ["bhsd", "bs(hd)"])
@pytest.mark.parametrize("pos", [0, 4, 12])
def test_attention_dynamic_kv_attends_the_first_pos_plus_s_q_keys(layout, pos):
    # a KV cache of 17 rows of which pos + S_q are filled: same as SDPA over those keys, causal
    q, k, v = qkv(1, 6, 2, 3, 17, 4, seed=42)
    ins = [to_layout(a, layout) for a in (q, k, v)] + [np.array([pos], np.int32)]
    attrs = dict(num_heads=6, head_dim=4, num_kv_heads=2, mask_kind=MaskKind.CAUSAL, dynamic_kv=True)
    out = run(lambda g, *xs: g.apply(Attention(**attrs), list(xs), "attn"), q=ins[0], k=ins[1], v=ins[2],
              pos=ins[3])
    filled = pos + 3
    expected = sdpa(q, k[:, :, :filled], v[:, :, :filled], attn_mask=keep_mask(MaskKind.CAUSAL, 3, filled),
                    enable_gqa=True)
    close(from_layout(out, layout, 1, 6), expected)

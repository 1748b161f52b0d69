"""The numpy reference (rlxpy.ir.reference.nn) against independent oracles: torch for matmuls, norms
and attention, transformers' rotate_half and a complex-multiply rope, the Random123 known answers
for Threefry2x32-20, empirical sampling distributions, and GGML block decoders written here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType, quants
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from rlxpy.errors import InputError
from rlxpy.ir import DType, Graph
from rlxpy.ir.ops import ActKind, Attention, MaskKind, Rope
from rlxpy.ir.ops.quant import gguf_row_bytes
from rlxpy.ir.reference import run_reference
from rlxpy.ir.reference.sample import threefry2x32


def run(build, **arrays: np.ndarray) -> np.ndarray:
    """One Input per keyword array, ``build(g, *inputs)`` -> node, evaluated by the reference."""
    g = Graph("t")
    nodes = [g.input(name, a.shape, DType.parse(a.dtype)) for name, a in arrays.items()]
    out = build(g, *nodes)
    g.output(out)
    return run_reference(g, arrays)[out.name]


def rand(shape, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def close(actual: np.ndarray, expected, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    expected = expected.numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != oracle {expected.shape}"
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


# -- matmuls ---------------------------------------------------------------------------------------
MATMUL_SHAPES = [((1, 1), (1, 1)), ((3, 17), (17, 5)), ((255, 33), (33, 17)), ((17, 255), (255, 3)),
                 ((2, 3, 17), (17, 5)), ((1, 255, 3), (3, 1)),  # [..., M, K] x [K, N]
                 ((2, 3, 17, 5), (2, 3, 5, 4)), ((3, 1, 7), (3, 7, 255))]  # batched


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES, ids=str)
def test_matmul_matches_torch(a_shape, b_shape):
    a, b = rand(a_shape, 1), rand(b_shape, 2)
    close(run(lambda g, x, y: g.matmul(x, y), a=a, b=b), torch.matmul(t(a).double(), t(b).double()))


def test_matmul_propagates_nan_and_inf():
    a = rand((3, 17), 3)
    a[0, 4], a[1, 0] = np.nan, np.inf
    b = np.abs(rand((17, 5), 4))
    close(run(lambda g, x, y: g.matmul(x, y), a=a, b=b), torch.matmul(t(a), t(b)))


ACTS = {
    None: lambda x: x, ActKind.RELU: torch.relu, ActKind.SIGMOID: torch.sigmoid, ActKind.TANH: torch.tanh,
    ActKind.EXP: torch.exp, ActKind.LOG: torch.log, ActKind.SQRT: torch.sqrt, ActKind.RSQRT: torch.rsqrt,
    ActKind.NEG: torch.neg, ActKind.ABS: torch.abs, ActKind.GELU: F.gelu, ActKind.SILU: F.silu,
    ActKind.GELU_APPROX: lambda x: F.gelu(x, approximate="tanh"),
    ActKind.ROUND: lambda x: torch.sign(x) * torch.floor(torch.abs(x) + 0.5),
    ActKind.SIN: torch.sin, ActKind.COS: torch.cos, ActKind.TAN: torch.tan, ActKind.ATAN: torch.atan,
}


@pytest.mark.parametrize("x_shape", [(17, 33), (2, 3, 33)], ids=str)
@pytest.mark.parametrize("act", list(ACTS), ids=lambda k: k.name if k is not None else "none")
def test_fused_matmul_bias_act_honours_every_activation(act, x_shape):
    assert set(ACTS) - {None} == set(ActKind)
    x, w, bias = rand(x_shape, 5), rand((33, 5), 6, 0.3), rand((5,), 7)
    out = run(lambda g, a, b, c: g.linear(a, b, c, act), x=x, w=w, bias=bias)
    # the pre-activation is an f32 tensor (as in a kernel epilogue), so round it before act
    pre = (torch.matmul(t(x).double(), t(w).double()) + t(bias).double()).float().double()
    close(out, ACTS[act](pre).float())


@pytest.mark.parametrize("idx_dtype", [np.int32, np.float32])
def test_grouped_matmul_matches_per_row_torch_and_zeroes_bad_experts(idx_dtype):
    x, w = rand((17, 33), 8), rand((3, 33, 5), 9)
    idx = np.array([0, 1, 2, 2, 1, 0, -1, 3, 7, 1, 0, 2, 2, 2, 1, 0, 1], dtype=idx_dtype)
    if idx_dtype is np.float32:
        idx = idx + np.float32(0.5) * (idx >= 0)  # fractional ids truncate
    out = run(lambda g, a, b, c: g.grouped_matmul(a, b, c), x=x, w=w, idx=idx)
    experts = torch.from_numpy(np.trunc(idx).astype(np.int64))
    valid = (experts >= 0) & (experts < 3)
    gathered = t(w).double()[experts.clamp(0, 2)]  # [M, K, N]
    expected = torch.einsum("mk,mkn->mn", t(x).double(), gathered) * valid[:, None]
    close(out, expected)
    assert not out[6].any() and not out[7].any() and not out[8].any()


# -- normalisation ----------------------------------------------------------------------------------
NORM_SHAPES = [(1, 1), (3, 17), (255, 33), (2, 3, 257)]


@pytest.mark.parametrize("with_beta", [False, True])
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
def test_layer_norm_matches_torch(shape, with_beta):
    hidden = shape[-1]
    x, gamma, beta = rand(shape, 10, 3.0) + 2, rand((hidden,), 11), rand((hidden,), 12)
    if with_beta:
        out = run(lambda g, a, b, c: g.layer_norm(a, b, c, eps=1e-5), x=x, gamma=gamma, beta=beta)
    else:
        out = run(lambda g, a, b: g.layer_norm(a, b, eps=1e-5), x=x, gamma=gamma)
    expected = F.layer_norm(t(x).double(), (hidden,), t(gamma).double(),
                            t(beta).double() if with_beta else None, eps=1e-5)
    close(out, expected)


@pytest.mark.parametrize("with_beta", [False, True])
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
def test_rms_norm_matches_torch_plus_beta(shape, with_beta):
    hidden = shape[-1]
    x, gamma, beta = rand(shape, 13, 3.0), rand((hidden,), 14), rand((hidden,), 15)
    if with_beta:
        out = run(lambda g, a, b, c: g.rms_norm(a, b, c, eps=1e-6), x=x, gamma=gamma, beta=beta)
    else:
        out = run(lambda g, a, b: g.rms_norm(a, b, eps=1e-6), x=x, gamma=gamma)
    expected = F.rms_norm(t(x).double(), (hidden,), t(gamma).double(), eps=1e-6)
    close(out, expected + (t(beta).double() if with_beta else 0))


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("shape", NORM_SHAPES[1:], ids=str)
def test_fused_residual_norms_match_torch(shape, with_bias, kind):
    hidden = shape[-1]
    x, res = rand(shape, 16, 2.0), rand(shape, 17, 2.0)
    bias, gamma, beta = rand((hidden,), 18), rand((hidden,), 19), rand((hidden,), 20)
    arrays = dict(x=x, res=res, gamma=gamma, beta=beta) | ({"bias": bias} if with_bias else {})
    method = "residual_layer_norm" if kind == "layer" else "residual_rms_norm"

    def build(g, a, r, gm, bt, *b):
        return getattr(g, method)(a, r, gm, bt, bias=b[0] if b else None)

    out = run(build, **arrays)
    total = (t(x).double() + t(res).double() + (t(bias).double() if with_bias else 0)).float().double()
    if kind == "layer":
        expected = F.layer_norm(total, (hidden,), t(gamma).double(), t(beta).double(), eps=1e-5)
    else:
        expected = F.rms_norm(total, (hidden,), t(gamma).double(), eps=1e-6) + t(beta).double()
    close(out, expected)


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


# -- rotary embedding --------------------------------------------------------------------------------
def rope_tables(max_pos: int, rot: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cos/sin [max_pos, rot/2] and the angles, theta_i = pos * base^(-2i/rot)."""
    inv_freq = base ** (-np.arange(0, rot, 2, dtype=np.float64) / rot)
    angles = np.arange(max_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32), angles


def rope(x, cos, sin, position=None, **attrs) -> np.ndarray:
    """Run one Rope node. (Graph.rope calls self.add; build the op with apply.)"""
    arrays = dict(x=x, cos=cos, sin=sin) | ({"position": position} if position is not None else {})
    return run(lambda g, *xs: g.apply(Rope(**attrs), list(xs), "rope"), **arrays)


def hf_rope(x_bhsd: torch.Tensor, cos: np.ndarray, sin: np.ndarray, positions: np.ndarray, rot: int):
    """transformers' llama apply_rotary_pos_emb on the first ``rot`` dims; the rest pass through."""
    c = torch.from_numpy(np.concatenate([cos, cos], -1)[positions]).double()[None]  # [1, S, rot]
    s = torch.from_numpy(np.concatenate([sin, sin], -1)[positions]).double()[None]
    rotated, _ = apply_rotary_pos_emb(x_bhsd[..., :rot], x_bhsd[..., :rot], c, s, unsqueeze_dim=1)
    return torch.cat([rotated, x_bhsd[..., rot:]], -1)


def complex_rope(x_bhsd: torch.Tensor, angles: np.ndarray, positions: np.ndarray, rot: int):
    """Interleaved (GPT-J / llama.cpp) rope as a complex product: (x_2i + j x_2i+1) * e^(j theta_i)."""
    pairs = torch.view_as_complex(x_bhsd[..., :rot].reshape(*x_bhsd.shape[:-1], rot // 2, 2).contiguous())
    phase = torch.polar(torch.ones(len(positions), rot // 2, dtype=torch.float64),
                        torch.from_numpy(angles[positions]))
    rotated = torch.view_as_real(pairs * phase).reshape(*x_bhsd.shape[:-1], rot)
    return torch.cat([rotated, x_bhsd[..., rot:]], -1)


@pytest.mark.parametrize("interleaved", [False, True], ids=["half_split", "interleaved"])
@pytest.mark.parametrize("head_dim,n_rot", [(8, 0), (16, 8), (17, 16), (2, 2), (64, 24)])
@pytest.mark.parametrize("seq", [1, 3, 17])
def test_rope_bhsd_matches_oracle(seq, head_dim, n_rot, interleaved):
    rot = n_rot or head_dim
    cos, sin, angles = rope_tables(40, rot)
    cos64, sin64 = np.cos(angles), np.sin(angles)
    x = rand((2, 3, seq, head_dim), 42)
    offset = 5
    out = rope(x, cos, sin, head_dim=head_dim, n_rot=n_rot, interleaved=interleaved, position_offset=offset)
    positions = np.arange(seq) + offset
    if interleaved:
        expected = complex_rope(t(x).double(), angles, positions, rot)
    else:
        expected = hf_rope(t(x).double(), cos64, sin64, positions, rot)
    close(out, expected, atol=1e-6)


@pytest.mark.parametrize("interleaved", [False, True], ids=["half_split", "interleaved"])
def test_rope_bs_hd_layout_with_position_input(interleaved):
    b, s, heads, head_dim = 2, 3, 4, 8
    cos, sin, angles = rope_tables(64, head_dim)
    x = rand((b, s, heads * head_dim), 43)
    position = np.array([17], dtype=np.int32)  # decode step: rows sit at 17 + 2 + s
    out = rope(x, cos, sin, position, head_dim=head_dim, interleaved=interleaved, position_offset=2)
    positions = np.arange(s) + 19
    x_bhsd = t(x).double().reshape(b, s, heads, head_dim).transpose(1, 2)
    if interleaved:
        expected = complex_rope(x_bhsd, angles, positions, head_dim)
    else:
        expected = hf_rope(x_bhsd, np.cos(angles), np.sin(angles), positions, head_dim)
    close(out, expected.transpose(1, 2).reshape(b, s, heads * head_dim), atol=1e-6)


def test_rope_position_input_past_the_tables_is_an_input_error():
    cos, sin, _ = rope_tables(8, 4)
    with pytest.raises(InputError, match=r"rope \(Rope\): positions 7..9 exceed the 8-row cos/sin tables"):
        rope(rand((1, 3, 4), 45), cos, sin, np.array([6], np.int32), head_dim=4, position_offset=1)


def test_rope_at_position_zero_is_identity():
    cos, sin, _ = rope_tables(4, 8)
    x = rand((1, 1, 1, 8), 44)
    np.testing.assert_array_equal(rope(x, cos, sin, head_dim=8), x)


# -- sampling ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("counter,key,expected", [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry2x32_20_known_answers(counter, key, expected):
    # Random123's kat_vectors for threefry2x32_20 (counter, key -> output)
    x0, x1 = threefry2x32((np.array([counter[0]], np.uint32), np.array([counter[1]], np.uint32)), key)
    assert (int(x0[0]), int(x1[0])) == expected


def test_threefry2x32_is_elementwise_over_counters():
    c0 = np.array([0, 0xFFFFFFFF, 0x243F6A88, 7], np.uint32)
    c1 = np.array([0, 0xFFFFFFFF, 0x85A308D3, 9], np.uint32)
    key = (0x13198A2E, 0x03707344)
    x0, x1 = threefry2x32((c0, c1), key)
    for i in range(4):
        y0, y1 = threefry2x32((c0[i:i + 1], c1[i:i + 1]), key)
        assert (x0[i], x1[i]) == (y0[0], y1[0])


def sample(logits: np.ndarray, seed_pair: np.ndarray | None = None, **attrs) -> np.ndarray:
    arrays = dict(logits=logits) | ({"seed": seed_pair} if seed_pair is not None else {})
    return run(lambda g, x, *s: g.sample(x, seed_input=s[0] if s else None, **attrs), **arrays)


class SeedSweep:
    """One graph with a u32[2] seed input, run over many seeds (rows x seeds draws)."""

    def __init__(self, logits: np.ndarray, **attrs) -> None:
        self.logits = logits
        self.graph = Graph("sample")
        x = self.graph.input("logits", logits.shape)
        seed = self.graph.input("seed", (2,), "u32")
        self.graph.output(self.graph.sample(x, seed_input=seed, name="token", **attrs))

    def draws(self, seeds: range) -> np.ndarray:
        picks = []
        for seed in seeds:
            pair = np.array([seed, seed * 7919], np.uint32)  # vary both words of the 64-bit seed
            picks.append(run_reference(self.graph, {"logits": self.logits, "seed": pair})["token"].ravel())
        return np.concatenate(picks)


@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (2, 3, 255)], ids=str)
def test_sample_temperature_zero_is_argmax(shape):
    logits = rand(shape, 45, 3.0)
    out = sample(logits, temperature=0.0, seed=123)
    assert out.dtype == np.int32 and out.shape == shape[:-1]
    np.testing.assert_array_equal(out, torch.argmax(t(logits), -1).numpy())


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("seed", [0, 1, 2**40 + 5])
def test_sample_top_k_one_is_argmax(temperature, seed):
    logits = rand((17, 255), 46, 2.0)
    out = sample(logits, temperature=temperature, top_k=1, seed=seed)
    np.testing.assert_array_equal(out, torch.argmax(t(logits), -1).numpy())


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.6])
def test_sample_distribution_matches_softmax_over_seeds(temperature):
    logits = np.array([[1.0, 0.2, -0.5, 2.0, 0.0]], dtype=np.float32).repeat(16, axis=0)
    draws = SeedSweep(logits, temperature=temperature).draws(range(250))  # 4000 draws
    frequency = np.bincount(draws, minlength=5) / draws.size
    expected = torch.softmax(t(logits[0]).double() / temperature, -1).numpy()
    tolerance = 4.5 * np.sqrt(expected * (1 - expected) / draws.size) + 1e-3
    assert np.all(np.abs(frequency - expected) < tolerance), (frequency, expected)


def _allowed(probabilities: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """Tokens the filters keep: the k most likely (stable order), and those whose better mass < p."""
    order = np.argsort(-probabilities, kind="stable")
    before = np.concatenate([[0.0], np.cumsum(probabilities[order])[:-1]])
    keep = np.ones(order.size, bool)
    if top_k:
        keep &= np.arange(order.size) < top_k
    if top_p < 1:
        keep &= before < top_p
    return np.sort(order[keep])


@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), (0, 0.6), (0, 0.95), (3, 0.5), (8, 0.9)])
def test_sample_never_picks_a_filtered_token(top_k, top_p):
    logits = rand((1, 17), 47, 1.5).repeat(8, axis=0)
    temperature = 1.3
    draws = SeedSweep(logits, temperature=temperature, top_k=top_k, top_p=top_p).draws(range(150))
    probabilities = torch.softmax(t(logits[0]).double() / temperature, -1).numpy()
    allowed = _allowed(probabilities, top_k, top_p)
    assert 1 <= allowed.size < 17
    assert set(np.unique(draws)) <= set(allowed.tolist())
    # and the kept tokens keep their renormalised odds
    frequency = np.bincount(draws, minlength=17)[allowed] / draws.size
    expected = probabilities[allowed] / probabilities[allowed].sum()
    assert np.all(np.abs(frequency - expected) < 4.5 * np.sqrt(expected * (1 - expected) / draws.size) + 1e-3)


def test_sample_seed_input_overrides_the_seed_attribute():
    logits = np.zeros((33, 255), np.float32)  # flat: every token equally likely
    seed = (9 << 32) | 12345
    by_attr = sample(logits, seed=seed)
    by_input = sample(logits, np.array([12345, 9], np.uint32), seed=777)
    np.testing.assert_array_equal(by_attr, by_input)
    np.testing.assert_array_equal(by_attr, sample(logits, seed=seed))  # deterministic
    assert (by_attr != sample(logits, seed=seed + 1)).any()
    assert len(np.unique(by_attr)) > 20  # rows draw independently


# -- GGUF quantised ops ----------------------------------------------------------------------------------
def _f16(block: np.ndarray, start: int) -> float:
    return float(block[start:start + 2].view(np.float16)[0])


def _decode_legacy(block: np.ndarray, qtype: str) -> np.ndarray:
    """One 32-element block, read field by field as ggml's dequantize_row_* does."""
    y = np.zeros(32)
    if qtype == "Q8_0":  # d f16, 32 x i8
        d = _f16(block, 0)
        return d * block[2:34].view(np.int8).astype(np.float64)
    has_min = qtype in ("Q4_1", "Q5_1")
    d = _f16(block, 0)
    m = _f16(block, 2) if has_min else 0.0
    at = 4 if has_min else 2
    high = 0
    if qtype in ("Q5_0", "Q5_1"):  # 32 high bits, element j's fifth bit is bit j
        high = int.from_bytes(bytes(block[at:at + 4]), "little")
        at += 4
    nibbles = block[at:at + 16]
    for j in range(16):
        low, up = int(nibbles[j]) & 0xF, int(nibbles[j]) >> 4
        if qtype in ("Q5_0", "Q5_1"):
            low |= ((high >> j) & 1) << 4
            up |= ((high >> (j + 16)) & 1) << 4
        if has_min:
            y[j], y[j + 16] = low * d + m, up * d + m
        else:
            offset = 16 if qtype == "Q5_0" else 8
            y[j], y[j + 16] = (low - offset) * d, (up - offset) * d
    return y


def _scale_min_k4(j: int, q: np.ndarray) -> tuple[int, int]:
    if j < 4:
        return int(q[j]) & 63, int(q[j + 4]) & 63
    return ((int(q[j + 4]) & 0xF) | ((int(q[j - 4]) >> 6) << 4),
            (int(q[j + 4]) >> 4) | ((int(q[j]) >> 6) << 4))


def _decode_q4_k(block: np.ndarray) -> np.ndarray:
    """d f16, dmin f16, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles (ggml dequantize_row_q4_K)."""
    d, dmin, scales, qs = _f16(block, 0), _f16(block, 2), block[4:16], block[16:144]
    y = np.zeros(256)
    for chunk in range(4):
        sc1, m1 = _scale_min_k4(2 * chunk, scales)
        sc2, m2 = _scale_min_k4(2 * chunk + 1, scales)
        q = qs[32 * chunk: 32 * chunk + 32].astype(np.int64)
        y[64 * chunk: 64 * chunk + 32] = d * sc1 * (q & 0xF) - dmin * m1
        y[64 * chunk + 32: 64 * chunk + 64] = d * sc2 * (q >> 4) - dmin * m2
    return y


def _decode_q6_k(block: np.ndarray) -> np.ndarray:
    """128 low nibbles, 64 bytes of 2-bit highs, 16 i8 scales, d f16 (ggml dequantize_row_q6_K)."""
    ql, qh = block[0:128].astype(np.int64), block[128:192].astype(np.int64)
    scales, d = block[192:208].view(np.int8).astype(np.int64), _f16(block, 208)
    y = np.zeros(256)
    for half in range(2):
        low, high, sc = ql[64 * half:], qh[32 * half:], scales[8 * half:]
        for lane in range(32):
            group = lane // 16
            values = [((low[lane] & 0xF) | ((high[lane] >> 0) & 3) << 4) - 32,
                      ((low[lane + 32] & 0xF) | ((high[lane] >> 2) & 3) << 4) - 32,
                      ((low[lane] >> 4) | ((high[lane] >> 4) & 3) << 4) - 32,
                      ((low[lane + 32] >> 4) | ((high[lane] >> 6) & 3) << 4) - 32]
            for quarter, value in enumerate(values):
                y[128 * half + 32 * quarter + lane] = d * sc[group + 2 * quarter] * value
    return y


def decode_rows(raw: np.ndarray, qtype: str, k: int) -> np.ndarray:
    """[rows, row_bytes] u8 -> [rows, k] f64 with the decoders above."""
    block_bytes = gguf_row_bytes(qtype, k) // (k // (256 if qtype.endswith("_K") else 32))
    decode = {"Q4_K": _decode_q4_k, "Q6_K": _decode_q6_k}.get(qtype, lambda b: _decode_legacy(b, qtype))
    return np.stack([np.concatenate([decode(row[i:i + block_bytes]) for i in range(0, row.size, block_bytes)])
                     for row in raw])


def make_weight(qtype: str, rows: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """GGUF bytes [rows, row_bytes] and the floats they came from (None-like zeros for K-quants).

    Legacy types go through gguf.quants.quantize; it cannot quantize K-quants, so those get random
    blocks whose f16 scale fields are set to small finite values."""
    rng = np.random.default_rng(seed)
    if not qtype.endswith("_K"):
        source = rng.standard_normal((rows, k)).astype(np.float32)
        return quants.quantize(source, GGMLQuantizationType[qtype]), source
    raw = rng.integers(0, 256, (rows, gguf_row_bytes(qtype, k)), dtype=np.uint8)
    blocks = raw.reshape(rows, -1, 144 if qtype == "Q4_K" else 210)
    scale_fields = (0, 2) if qtype == "Q4_K" else (208,)
    for at in scale_fields:
        scale = rng.uniform(0.001, 0.02, blocks.shape[:2] + (1,)).astype(np.float16)
        blocks[..., at:at + 2] = scale.view(np.uint8)
    return raw, np.zeros((rows, k), np.float32)


LEGACY = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]
QTYPES = LEGACY + ["Q4_K", "Q6_K"]


@pytest.mark.parametrize("qtype", LEGACY)
def test_gguf_quantize_then_decode_round_trips_approximately(qtype):
    raw, source = make_weight(qtype, 3, 96, seed=50)
    decoded = decode_rows(raw, qtype, 96)
    step = {"Q8_0": 1 / 127, "Q4_0": 1 / 7, "Q4_1": 1 / 15, "Q5_0": 1 / 15, "Q5_1": 1 / 31}[qtype]
    assert np.abs(decoded - source).max() <= step * np.abs(source).max() * 1.01


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("x_shape,n", [((3, -1), 17), ((1, -1), 1), ((2, 3, -1), 3)], ids=str)
def test_dequant_matmul_gguf_matches_independent_decoder(qtype, x_shape, n):
    k = 256 if qtype.endswith("_K") else 96
    raw, _ = make_weight(qtype, n, k, seed=51)
    x = rand(tuple(k if d == -1 else d for d in x_shape), 52)
    out = run(lambda g, a, w: g.dequant_matmul_gguf(a, w, qtype, n, k), x=x, w=raw)
    assert out.dtype == np.float32 and out.shape == x.shape[:-1] + (n,)
    close(out, t(x).double() @ torch.from_numpy(decode_rows(raw, qtype, k)).T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1", "Q6_K"])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.float32])
def test_gather_gguf_clamps_and_decodes_rows(qtype, idx_dtype):
    k = 256 if qtype.endswith("_K") else 64
    raw, _ = make_weight(qtype, 17, k, seed=53)
    idx = np.array([[0, 16, 5], [-4, 30, 3]], dtype=idx_dtype)
    out = run(lambda g, table, i: g.gather_gguf(table, i, qtype, k), table=raw, idx=idx)
    assert out.shape == (2, 3, k)
    close(out, decode_rows(raw, qtype, k)[np.clip(idx.astype(np.int64), 0, 16)], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1", "Q5_0", "Q4_K"])
def test_dequant_grouped_matmul_routes_rows_to_experts(qtype):
    k = 256 if qtype.endswith("_K") else 64
    experts, n = 3, 5
    raw = np.stack([make_weight(qtype, n, k, seed=60 + e)[0] for e in range(experts)])  # [E, n, row_bytes]
    x = rand((17, k), 54)
    idx = np.array([0, 1, 2, 2, 1, 0, -1, 3, 1, 0, 2, 2, 2, 1, 0, 1, 9], dtype=np.int32)
    out = run(lambda g, a, w, i: g.dequant_grouped_matmul(a, w, i, qtype, n, k), x=x, w=raw, idx=idx)
    weights = [torch.from_numpy(decode_rows(raw[e], qtype, k)) for e in range(experts)]
    expected = torch.stack([t(x[row]).double() @ weights[e].T if 0 <= e < experts else torch.zeros(n)
                            for row, e in enumerate(idx)])
    close(out, expected, rtol=1e-5, atol=1e-4)

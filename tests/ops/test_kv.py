"""KV-cache ops: CacheWrite and the fused RopeKvAppend, against torch-built expectations."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, rand

import rlxpy
from rlxpy.ir.reference import run_reference


def rope_torch(x, cos, sin, pos, head_dim, interleaved):
    """Rotary embedding written with torch complex numbers (interleaved) or rotate_half."""
    import torch

    t = torch.from_numpy(x).double()
    rows, width = t.shape
    heads = t.reshape(rows, width // head_dim, head_dim)
    c = torch.from_numpy(cos[pos : pos + rows]).double()[:, None, :]
    s = torch.from_numpy(sin[pos : pos + rows]).double()[:, None, :]
    if interleaved:
        z = torch.view_as_complex(heads.reshape(rows, -1, head_dim // 2, 2).contiguous())
        out = torch.view_as_real(z * torch.complex(c, s)).reshape(rows, width)
    else:
        from transformers.models.llama.modeling_llama import rotate_half

        cc, ss = torch.cat([c, c], -1), torch.cat([s, s], -1)
        out = (heads * cc + rotate_half(heads) * ss).reshape(rows, width)
    return out.float().numpy()


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rows,pos", [(1, 0), (1, 11), (3, 5), (4, 8)])
def test_rope_kv_append_matches_rope_and_cache_write(device, interleaved, rows, pos):
    head_dim, heads, kv_heads, capacity = 8, 3, 1, 12
    qw, kw = heads * head_dim, kv_heads * head_dim
    angles = np.arange(capacity)[:, None] * (1.0 / 100 ** (np.arange(0, head_dim, 2) / head_dim))[None]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    g = rlxpy.Graph()
    qkv = g.input("qkv", [rows, qw + 2 * kw])
    p = g.input("pos", [1], "i32")
    kc, vc = g.param("kc", [capacity, kw]), g.param("vc", [capacity, kw])
    q = g.rope_kv_append(
        qkv, kc, vc, g.constant(cos), g.constant(sin), p, head_dim, qw, kw, interleaved=interleaved, name="q"
    )
    k_all = g.add(g.reshape(kc, [capacity, kw]), 0.0, name="k_all")  # read after the append
    v_all = g.add(g.reshape(vc, [capacity, kw]), 0.0, name="v_all")
    g.output(q, k_all, v_all)
    exe = rlxpy.compile(g)
    start_k, start_v = rand((capacity, kw), 1), rand((capacity, kw), 2)
    exe.set_param("kc", start_k)
    exe.set_param("vc", start_v)
    x = rand((rows, qw + 2 * kw), 3)
    out = exe.run({"qkv": x, "pos": np.array([pos], np.int32)})
    fit = max(0, min(rows, capacity - pos))
    want_k, want_v = start_k.copy(), start_v.copy()
    want_k[pos : pos + fit] = rope_torch(x[:fit, qw : qw + kw], cos, sin, pos, head_dim, interleaved)
    want_v[pos : pos + fit] = x[:fit, qw + kw :]
    assert_close(
        out["q"][:fit], rope_torch(x[:fit, :qw], cos, sin, pos, head_dim, interleaved)[:fit], 1e-5, 1e-6, "q"
    )
    assert_close(out["k_all"], want_k, 1e-5, 1e-6, "k cache")
    assert_close(out["v_all"], want_v, 0, 0, "v cache")
    ref = run_reference(g, {"qkv": x, "pos": np.array([pos], np.int32)}, {"kc": start_k, "vc": start_v})
    assert_close(ref["k_all"], want_k, 1e-5, 1e-6, "reference k cache")


def test_cache_write_keeps_rows_across_runs_and_drops_overflow(device):
    g = rlxpy.Graph()
    c = g.param("cache", [6, 4])
    w = g.cache_write(c, g.input("rows", [2, 4]), g.input("pos", [1], "i32"), name="w")
    g.output(w)
    exe = rlxpy.compile(g)
    exe.set_param("cache", np.zeros((6, 4), np.float32))
    exe.run({"rows": np.ones((2, 4), np.float32), "pos": np.array([1], np.int32)})
    out = exe.run({"rows": np.full((2, 4), 2, np.float32), "pos": np.array([5], np.int32)})["w"]
    want = np.zeros((6, 4), np.float32)
    want[1:3] = 1
    want[5] = 2
    np.testing.assert_array_equal(out, want)


def test_bad_shapes_are_refused():
    g = rlxpy.Graph()
    with pytest.raises(rlxpy.GraphError, match=r"qkv must be \[S, 40\]"):
        g.rope_kv_append(
            g.input("qkv", [1, 39]),
            g.param("k", [4, 8]),
            g.param("v", [4, 8]),
            g.param("c", [4, 4]),
            g.param("s", [4, 4]),
            g.input("p", [1], "i32"),
            8,
            24,
            8,
        )


@pytest.mark.parametrize("s_q,pos,capacity", [(1, 0, 16), (1, 37, 64), (3, 10, 32), (9, 20, 5000)])
def test_attention_with_kv_len_from_position_matches_torch(device, s_q, pos, capacity):
    """KV-cache attention: only keys [0, pos + S_q) exist, causal bottom-right over them."""
    import torch

    heads, kv_heads, dim = 4, 2, 8
    rng = np.random.default_rng(pos + s_q)
    q = rng.standard_normal((1, s_q, heads * dim)).astype(np.float32)
    k = rng.standard_normal((1, capacity, kv_heads * dim)).astype(np.float32)
    v = rng.standard_normal((1, capacity, kv_heads * dim)).astype(np.float32)
    k[:, pos + s_q :] = np.nan  # never-written cache rows must not be read
    v[:, pos + s_q :] = np.nan
    g = rlxpy.Graph()
    qn, kn, vn = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
    p = g.input("pos", [1], "i32")
    g.output(
        g.attention(qn, kn, vn, heads, dim, num_kv_heads=kv_heads, mask_kind="causal", kv_len=p, name="o")
    )
    out = rlxpy.compile(g).run({"q": q, "k": k, "v": v, "pos": np.array([pos], np.int32)})["o"]
    n = pos + s_q
    tq = torch.from_numpy(q).reshape(1, s_q, heads, dim).transpose(1, 2)
    tk = torch.from_numpy(k[:, :n]).reshape(1, n, kv_heads, dim).transpose(1, 2)
    tv = torch.from_numpy(v[:, :n]).reshape(1, n, kv_heads, dim).transpose(1, 2)
    keep = torch.arange(n)[None, :] <= (torch.arange(s_q)[:, None] + pos)
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=keep, enable_gqa=True)
    assert_close(out, want.transpose(1, 2).reshape(1, s_q, heads * dim).numpy(), 1e-5, 1e-5, "attention")

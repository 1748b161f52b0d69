"""Backward ops vs torch autograd through the forward ops' rlxpy semantics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlxpy.errors import GraphError
from rlxpy.ir.graph import Graph
from rlxpy.ir.ops import Rope
from rlxpy.ir.ops.backward import AttentionBackward, AttentionWrt, LayerNormBackwardGamma
from rlxpy.ir.reference import run_reference


def _rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _t(array, grad=False):
    return torch.from_numpy(np.asarray(array)).double().requires_grad_(grad)


def _close(actual, expected, tol=1e-5):
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol, equal_nan=True)


NORM_SHAPES = [(1,), (3, 1), (17, 5), (2, 3, 255)]


@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_rms_norm_backward_matches_autograd(shape):
    x, gamma, beta, dy = _rand(shape, 1), _rand(shape[-1:], 2), _rand(shape[-1:], 3), _rand(shape, 4)
    g = Graph()
    ins = (g.input("x", shape), g.param("gamma", gamma.shape), g.param("beta", beta.shape),
           g.input("dy", shape))
    dx = g.rms_norm_backward_input(ins[0], ins[1], ins[3], beta=ins[2], eps=1e-5)
    dgamma = g.rms_norm_backward_gamma(ins[0], ins[1], ins[3], beta=ins[2], eps=1e-5)
    dbeta = g.rms_norm_backward_beta(ins[0], ins[1], ins[3], beta=ins[2], eps=1e-5)
    dx_no_beta = g.rms_norm_backward_input(ins[0], ins[1], ins[3], eps=1e-5)
    g.output(dx, dgamma, dbeta, dx_no_beta)
    out = run_reference(g, {"x": x, "dy": dy}, {"gamma": gamma, "beta": beta})
    tx, tg, tb = _t(x, True), _t(gamma, True), _t(beta, True)
    y = tx * torch.rsqrt((tx * tx).mean(-1, keepdim=True) + 1e-5) * tg + tb  # rlxpy's RmsNorm (with beta)
    y.backward(_t(dy))
    _close(out[dx.name], tx.grad)
    _close(out[dx_no_beta.name], tx.grad)
    _close(out[dgamma.name], tg.grad)
    _close(out[dbeta.name], tb.grad)


@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_layer_norm_backward_matches_autograd(shape):
    x, gamma, beta, dy = _rand(shape, 5) + 3.0, _rand(shape[-1:], 6), _rand(shape[-1:], 7), _rand(shape, 8)
    g = Graph()
    xin, gin, dyin = g.input("x", shape), g.param("gamma", gamma.shape), g.input("dy", shape)
    dx = g.layer_norm_backward_input(xin, gin, dyin, eps=1e-5)
    dgamma = g.layer_norm_backward_gamma(xin, dyin, eps=1e-5)
    g.output(dx, dgamma)
    out = run_reference(g, {"x": x, "dy": dy}, {"gamma": gamma})
    tx, tg = _t(x, True), _t(gamma, True)
    F.layer_norm(tx, shape[-1:], tg, _t(beta), 1e-5).backward(_t(dy))
    _close(out[dx.name], tx.grad, 1e-4)
    _close(out[dgamma.name], tg.grad, 1e-4)


def test_norm_backward_errors():
    g = Graph()
    x, dy = g.input("x", (4, 8)), g.input("dy", (4, 8))
    with pytest.raises(GraphError, match=r"bad \(RmsNormBackwardInput\): gamma/beta must be \[8\]"):
        g.rms_norm_backward_input(x, g.param("gamma", (7,)), dy, name="bad")
    with pytest.raises(GraphError, match=r"dy f32\[4, 9\] must match x"):
        g.layer_norm_backward_gamma(x, g.input("dy2", (4, 9)))
    with pytest.raises(GraphError, match="last axis only"):
        g.apply(LayerNormBackwardGamma(axis=0), [x, dy])


def _torch_rope(x, cos, sin, head_dim, n_rot, interleaved, offset):
    """rlxpy's Rope on [..., S, H*D]: rotate the first n_rot dims of each head."""
    seq = x.shape[-2]
    heads = x.shape[-1] // head_dim
    xh = x.reshape(x.shape[:-1] + (heads, head_dim))
    c, s = cos[offset: offset + seq, None, :], sin[offset: offset + seq, None, :]
    rot, rest = xh[..., :n_rot], xh[..., n_rot:]
    if interleaved:
        even, odd = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack([even * c - odd * s, odd * c + even * s], dim=-1).flatten(-2)
    else:
        first, second = rot[..., : n_rot // 2], rot[..., n_rot // 2:]
        rotated = torch.cat([first * c - second * s, second * c + first * s], dim=-1)
    return torch.cat([rotated, rest], dim=-1).reshape(x.shape)


@pytest.mark.parametrize("shape, head_dim, n_rot, interleaved, offset", [
    ((1, 2), 2, 0, False, 0),
    ((3, 8), 4, 0, True, 2),
    ((2, 17, 12), 6, 4, False, 1),
    ((2, 3, 5, 8), 8, 6, True, 0),
])
def test_rope_backward_matches_autograd(shape, head_dim, n_rot, interleaved, offset):
    rot = n_rot or head_dim
    angles = np.arange(40)[:, None] * (0.5 ** np.arange(rot // 2))[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    x, dy = _rand(shape, 1), _rand(shape, 2)
    g = Graph()
    xin, dyin = g.input("x", shape), g.input("dy", shape)
    cin, sin_in = g.param("cos", cos.shape), g.param("sin", sin.shape)
    forward = g.apply(Rope(head_dim, n_rot, interleaved, offset), [xin, cin, sin_in])
    dx = g.rope_backward(dyin, cin, sin_in, head_dim, n_rot, interleaved, offset)
    g.output(forward, dx)
    out = run_reference(g, {"x": x, "dy": dy}, {"cos": cos, "sin": sin})
    tx = _t(x, True)
    y = _torch_rope(tx, _t(cos), _t(sin), head_dim, rot, interleaved, offset)
    _close(out[forward.name], y)  # the torch forward is rlxpy's forward
    y.backward(_t(dy))
    _close(out[dx.name], tx.grad)


def test_rope_backward_position_input_and_errors():
    angles = np.arange(10)[:, None] * np.array([1.0, 0.1])[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    dy = _rand((2, 3, 4), 3)
    g = Graph()
    dyin, cin, sin_in = g.input("dy", dy.shape), g.input("cos", cos.shape), g.input("sin", sin.shape)
    dx = g.rope_backward(dyin, cin, sin_in, 4, position=g.input("pos", (1,), "i32"))
    g.output(dx)
    got = run_reference(g, {"dy": dy, "cos": cos, "sin": sin, "pos": np.array([5], np.int32)})[dx.name]
    tx = _t(np.zeros_like(dy), True)
    _torch_rope(tx, _t(cos), _t(sin), 4, 4, False, 5).backward(_t(dy))
    _close(got, tx.grad)
    with pytest.raises(GraphError, match=r"rb \(RopeBackward\): cos/sin must be \[max_pos, 2\]"):
        g.rope_backward(dyin, g.input("c3", (10, 3)), g.input("s3", (10, 3)), 4, name="rb")


@pytest.mark.parametrize("shape, axis", [((1,), -1), ((3, 17), -1), ((5, 4, 3), 1), ((255, 2), 0)])
@pytest.mark.parametrize("exclusive", [False, True])
def test_cumsum_backward_matches_autograd(shape, axis, exclusive):
    dy = _rand(shape, 9)
    g = Graph()
    dx = g.cumsum_backward(g.input("dy", shape), axis, exclusive)
    g.output(dx)
    got = run_reference(g, {"dy": dy})[dx.name]
    tx = _t(np.zeros(shape), True)
    y = torch.cumsum(tx, axis)
    (y - tx if exclusive else y).backward(_t(dy))
    _close(got, tx.grad)


@pytest.mark.parametrize("table_shape, idx, axis", [
    ((5,), [[0, 4], [2, 2]], 0),
    ((7, 3), [6, 0, 6, 1, 6], 0),
    ((2, 9, 3), [[8, 1, 1]], 1),
    ((4, 3, 17), [16, 0, 5], -1),
    ((6, 2), [-3, 2, 9, 1.7], 0),  # out of range: clamped like the forward; fractions truncate
])
def test_gather_backward_matches_autograd(table_shape, idx, axis):
    idx = np.array(idx, np.float32)
    table = _rand(table_shape, 10)
    g = Graph()
    tin, iin = g.input("table", table_shape), g.input("idx", idx.shape, "f32")
    gathered = g.gather(tin, iin, axis)
    dy = _rand(gathered.shape, 11)
    dtable = g.gather_backward(g.input("dy", dy.shape), iin, table_shape[axis], axis)
    g.output(dtable)
    got = run_reference(g, {"table": table, "idx": idx, "dy": dy})[dtable.name]
    tt = _t(table, True)
    dim = axis % len(table_shape)
    clamped = torch.from_numpy(np.clip(np.trunc(idx), 0, table_shape[axis] - 1).astype(np.int64))
    picked = torch.index_select(tt, dim, clamped.reshape(-1))
    picked.reshape(gathered.shape).backward(_t(dy))
    _close(got, tt.grad)


def test_gather_backward_errors():
    g = Graph()
    with pytest.raises(GraphError, match=r"gb \(GatherBackward\): dy f32\[4, 3\] must hold the index shape"):
        g.gather_backward(g.input("dy", (4, 3)), g.input("i", (5,), "i32"), 10, name="gb")
    with pytest.raises(GraphError, match="axis 2 out of range"):
        g.gather_backward(g.input("dy2", (4, 3)), g.input("i2", (4,), "i32"), 10, axis=2)


def _torch_attention(q, k, v, mask, heads, kv_heads, head_dim, layout, mask_kind, scale, softcap, window):
    """rlxpy's Attention in torch: to [B,H,S,D], GQA repeat, scale, softcap, mask, softmax, back."""
    def to_bhsd(t, h):
        if layout == "bhsd":
            return t
        if layout == "bshd":
            return t.transpose(1, 2)
        if layout == "bs(hd)":
            return t.reshape(t.shape[0], t.shape[1], h, head_dim).transpose(1, 2)
        return t.reshape(-1, h, t.shape[1], t.shape[2])

    qb, kb, vb = to_bhsd(q, heads), to_bhsd(k, kv_heads), to_bhsd(v, kv_heads)
    kb, vb = kb.repeat_interleave(heads // kv_heads, 1), vb.repeat_interleave(heads // kv_heads, 1)
    scores = qb @ kb.transpose(-1, -2) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    s_q, s_k = scores.shape[-2:]
    pos = torch.arange(s_q)[:, None] + (s_k - s_q)
    keys = torch.arange(s_k)[None, :]
    if mask_kind in ("causal", "sliding_window"):
        keep = keys <= pos
        if mask_kind == "sliding_window":
            keep &= keys >= pos - window
        scores = torch.where(keep, scores, torch.tensor(-3.4e38, dtype=scores.dtype))
    elif mask_kind == "custom":
        scores = torch.where(mask[:, None, :, :] < 0.5, torch.tensor(-1e9, dtype=scores.dtype), scores)
    elif mask_kind == "bias":
        scores = scores + mask
    out = torch.softmax(scores, -1) @ vb
    if layout == "bhsd":
        return out
    if layout == "bshd":
        return out.transpose(1, 2)
    if layout == "bs(hd)":
        return out.transpose(1, 2).reshape(q.shape)
    return out.reshape(q.shape)


ATTENTION_CASES = [
    # (layout, B, S_q, S_k, heads, kv_heads, head_dim, mask_kind, score_scale, softcap, window)
    ("bhsd", 1, 1, 1, 1, 1, 1, "none", None, None, 0),
    ("bhsd", 2, 3, 5, 4, 2, 3, "causal", None, None, 0),
    ("bshd", 1, 17, 17, 3, 1, 5, "sliding_window", 0.3, None, 4),
    ("bs(hd)", 2, 4, 7, 2, 2, 4, "custom", None, 5.0, 0),
    ("hsd", 2, 5, 3, 2, 1, 6, "bias", None, 2.0, 0),
    ("bhsd", 1, 6, 3, 2, 2, 4, "causal", None, None, 0),  # S_q > S_k: fully masked rows
]


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: f"{c[0]}-{c[7]}")
def test_attention_backward_matches_autograd(case):
    layout, b, s_q, s_k, heads, kv_heads, d, mask_kind, score_scale, softcap, window = case
    shapes = {
        "bhsd": lambda s, h: (b, h, s, d), "bshd": lambda s, h: (b, s, h, d),
        "bs(hd)": lambda s, h: (b, s, h * d), "hsd": lambda s, h: (b * h, s, d),
    }[layout]
    q, k, v = _rand(shapes(s_q, heads), 1), _rand(shapes(s_k, kv_heads), 2), _rand(shapes(s_k, kv_heads), 3)
    dy = _rand(q.shape, 4)
    mask = None
    if mask_kind == "custom":
        mask = (np.random.default_rng(5).random((b, s_q, s_k)) > 0.3).astype(np.float32)
        mask[0, 0] = 0.0  # one fully masked row
    elif mask_kind == "bias":
        mask = _rand((b, heads, s_q, s_k), 6)
    g = Graph()
    qin, kin, vin, dyin = (g.input(n, t.shape) for n, t in zip(("q", "k", "v", "dy"), (q, k, v, dy)))
    min_ = g.input("mask", mask.shape) if mask is not None else None
    grads = [g.attention_backward(qin, kin, vin, dyin, wrt, heads, d, kv_heads, mask_kind, min_, score_scale,
                                  softcap, window) for wrt in ("query", "key", "value")]
    g.output(*grads)
    feed = {"q": q, "k": k, "v": v, "dy": dy} | ({"mask": mask} if mask is not None else {})
    out = run_reference(g, feed)
    tq, tk, tv = _t(q, True), _t(k, True), _t(v, True)
    scale = score_scale if score_scale is not None else 1.0 / np.sqrt(d)
    y = _torch_attention(tq, tk, tv, _t(mask) if mask is not None else None, heads, kv_heads, d, layout,
                         mask_kind, scale, softcap, window)
    y.backward(_t(dy))
    for node, want in zip(grads, (tq.grad, tk.grad, tv.grad)):
        _close(out[node.name], want, 1e-5)


def test_attention_backward_agrees_with_torch_sdpa():
    q, k, v, dy = (_rand((2, 3, 17, 8), s) for s in range(4))
    g = Graph()
    qin, kin, vin, dyin = (g.input(n, q.shape) for n in ("q", "k", "v", "dy"))
    grads = [g.attention_backward(qin, kin, vin, dyin, w, 3, 8, mask_kind="causal")
             for w in (AttentionWrt.QUERY, AttentionWrt.KEY, AttentionWrt.VALUE)]
    g.output(*grads)
    out = run_reference(g, {"q": q, "k": k, "v": v, "dy": dy})
    tq, tk, tv = _t(q, True), _t(k, True), _t(v, True)
    F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(_t(dy))
    for node, want in zip(grads, (tq.grad, tk.grad, tv.grad)):
        _close(out[node.name], want, 1e-5)


def test_attention_backward_errors():
    g = Graph()
    q = g.input("q", (1, 4, 5, 8))
    with pytest.raises(GraphError, match=r"ab \(AttentionBackward\): dy f32\[1, 4, 5, 7\] must have q's"):
        g.attention_backward(q, q, q, g.input("dy", (1, 4, 5, 7)), "query", 4, 8, name="ab")
    with pytest.raises(GraphError, match="mask kind CUSTOM takes 4 inputs"):
        g.attention_backward(q, q, q, q, "key", 4, 8, mask_kind="custom")
    with pytest.raises(GraphError, match="not a multiple of num_kv_heads 3"):
        g.attention_backward(q, q, q, q, "value", 4, 8, num_kv_heads=3)
    with pytest.raises(GraphError, match="wrt must be an AttentionWrt"):
        g.apply(AttentionBackward(4, 8, 5), [q, q, q, q])  # type: ignore[arg-type]

"""GPU backward ops against torch.autograd (float64 on the same f32 inputs) and the reference, on odd
shapes: norm input and parameter gradients, RoPE, cumsum, gather (scatter-add), cross-entropy and
attention backward. f32 tolerances: NORM_TOL for row reductions, COLUMN_TOL for sums over up to a few
thousand rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close, rand

import rlxpy
from rlxpy.ir.reference import run_reference

NORM_TOL = (1e-4, 1e-5)
COLUMN_TOL = (1e-4, 1e-4)
NORM_SHAPES = [(1,), (3,), (17, 5), (255, 33), (2, 3, 257), (1100, 7)]


def t64(array, grad=False):
    return torch.from_numpy(np.ascontiguousarray(array)).double().requires_grad_(grad)


def run(g: rlxpy.Graph, feeds: dict) -> dict:
    exe = rlxpy.compile(g)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    got = exe.run(feeds)
    ref = run_reference(g, feeds)
    for name in got:
        assert_close(got[name], ref[name], *COLUMN_TOL, f"GPU vs reference for {name}")
    return got


@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
def test_norm_backward_ops_match_autograd(device, shape):
    hidden = shape[-1]
    x, dy = rand(shape, 1) + 0.5, rand(shape, 2)
    gamma, beta = rand((hidden,), 3), rand((hidden,), 4)
    g = rlxpy.Graph("norm_backward")
    xi, dyi = g.input("x", shape), g.input("dy", shape)
    gi, bi = g.input("gamma", (hidden,)), g.input("beta", (hidden,))
    outs = {
        "rms_dx": g.rms_norm_backward_input(xi, gi, dyi, bi, eps=1e-5),
        "rms_dgamma": g.rms_norm_backward_gamma(xi, gi, dyi, eps=1e-5),
        "rms_dbeta": g.rms_norm_backward_beta(xi, gi, dyi, bi, eps=1e-5),
        "ln_dx": g.layer_norm_backward_input(xi, gi, dyi, eps=1e-5),
        "ln_dgamma": g.layer_norm_backward_gamma(xi, dyi, eps=1e-5),
    }
    g.output(*outs.values())
    got = run(g, {"x": x, "dy": dy, "gamma": gamma, "beta": beta})
    tx, tg, tb = t64(x, True), t64(gamma, True), t64(beta, True)
    (F.rms_norm(tx, (hidden,), tg, eps=1e-5) + tb).backward(t64(dy))
    assert_close(got[outs["rms_dx"].name], tx.grad.numpy(), *NORM_TOL, "rms dx")
    assert_close(got[outs["rms_dgamma"].name], tg.grad.numpy(), *COLUMN_TOL, "rms dgamma")
    assert_close(got[outs["rms_dbeta"].name], tb.grad.numpy(), *COLUMN_TOL, "rms dbeta")
    tx, tg, tb = t64(x, True), t64(gamma, True), t64(beta, True)
    F.layer_norm(tx, (hidden,), tg, tb, eps=1e-5).backward(t64(dy))
    assert_close(got[outs["ln_dx"].name], tx.grad.numpy(), *NORM_TOL, "layer norm dx")
    assert_close(got[outs["ln_dgamma"].name], tg.grad.numpy(), *COLUMN_TOL, "layer norm dgamma")


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("n_rot, offset, with_pos", [(0, 0, False), (4, 2, False), (0, 1, True)])
def test_rope_backward_matches_autograd(device, interleaved, n_rot, offset, with_pos):
    head_dim, seq = 8, 17
    dy = rand((3, seq, 2 * head_dim), 5)
    angles = np.arange(40)[:, None] * (0.37 / (1 + np.arange((n_rot or head_dim) // 2)))[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    g = rlxpy.Graph("rope_backward")
    pos = g.input("pos", (1,), "i32") if with_pos else None
    tables = g.input("cos", cos.shape), g.input("sin", sin.shape)
    out = g.rope_backward(g.input("dy", dy.shape), *tables, head_dim,
                          n_rot, interleaved, offset, pos)
    g.output(out)
    feeds = {"dy": dy, "cos": cos, "sin": sin} | ({"pos": np.array([5], np.int32)} if with_pos else {})
    got = run(g, feeds)[out.name]
    x = t64(rand(dy.shape, 6), True)
    start = offset + (5 if with_pos else 0)
    torch_rope(x, t64(cos[start:start + seq]), t64(sin[start:start + seq]), head_dim, n_rot or head_dim,
               interleaved).backward(t64(dy))
    assert_close(got, x.grad.numpy(), 1e-5, 1e-6, "rope backward")


def torch_rope(x, cos, sin, head_dim, rot, interleaved):
    """rlxpy's Rope on x [..., S, L] with the tables' rows for positions 0..S-1 already picked."""
    xh = x.reshape(*x.shape[:-1], x.shape[-1] // head_dim, head_dim)
    c, s = cos[:, None, :], sin[:, None, :]
    if interleaved:
        even, odd = xh[..., 0:rot:2], xh[..., 1:rot:2]
        turned = torch.stack([even * c - odd * s, odd * c + even * s], -1).flatten(-2)
    else:
        first, second = xh[..., :rot // 2], xh[..., rot // 2:rot]
        turned = torch.cat([first * c - second * s, second * c + first * s], -1)
    return torch.cat([turned, xh[..., rot:]], -1).reshape(x.shape)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("shape, axis", [((1,), 0), ((17, 5), 0), ((17, 5), 1), ((3, 255, 2), 1)], ids=str)
def test_cumsum_backward_matches_autograd(device, shape, axis, exclusive):
    dy = rand(shape, 7)
    g = rlxpy.Graph("cumsum_backward")
    out = g.cumsum_backward(g.input("dy", shape), axis, exclusive)
    g.output(out)
    got = run(g, {"dy": dy})[out.name]
    tx = t64(rand(shape, 8), True)
    y = torch.cumsum(tx, dim=axis)
    (y - tx if exclusive else y).backward(t64(dy))
    assert_close(got, tx.grad.numpy(), 1e-5, 1e-5, "cumsum backward")


def test_cumsum_backward_over_the_loop_budget(device, monkeypatch):
    from rlxpy.wgpu_backend.lowering import reduce as reduce_lowering

    monkeypatch.setattr(reduce_lowering, "LOOP_BUDGET", 40)  # 24 steps per dispatch: 5 chunks of 101
    dy = rand((2, 101), 9)
    g = rlxpy.Graph("cumsum_backward_chunks")
    out = g.cumsum_backward(g.input("dy", dy.shape), 1, exclusive=True)
    g.output(out)
    exe = rlxpy.compile(g)
    assert len(exe.schedule.steps) == 5
    want = np.flip(np.cumsum(np.flip(dy.astype(np.float64), 1), 1), 1) - dy
    assert_close(exe.run({"dy": dy})[out.name], want, 1e-5, 1e-5, "chunked suffix scan")


@pytest.mark.parametrize("index_dtype", ["i32", "i64", "f32"])
@pytest.mark.parametrize("table_shape, idx_shape, axis", [((7, 5), (9,), 0), ((1, 3), (4,), 0),
                                                          ((2, 11, 65), (3, 5), 1), ((300, 2), (1000,), 0),
                                                          ((3, 70), (1000,), 0)],  # full match masks
                         ids=str)
def test_gather_backward_scatter_adds_like_autograd(device, table_shape, idx_shape, axis, index_dtype):
    dim = table_shape[axis]
    idx = np.random.default_rng(10).integers(-2, dim + 2, idx_shape)  # out of range: clamped like the forward
    out_shape = table_shape[:axis] + idx_shape + table_shape[axis + 1:]
    dy = rand(out_shape, 11)
    g = rlxpy.Graph("gather_backward")
    out = g.gather_backward(g.input("dy", out_shape), g.input("idx", idx_shape, index_dtype), dim, axis)
    g.output(out)
    numpy_dtype = {"i32": np.int32, "i64": np.int64, "f32": np.float32}[index_dtype]
    got = run(g, {"dy": dy, "idx": idx.astype(numpy_dtype)})
    table = t64(rand(table_shape, 12), True)
    clamped = torch.from_numpy(np.clip(idx, 0, dim - 1).reshape(-1))
    picked = torch.index_select(table, axis, clamped).reshape(out_shape)
    picked.backward(t64(dy))
    assert_close(got[out.name], table.grad.numpy(), *COLUMN_TOL, "gather backward")  # up to 333 terms a row


def test_gather_backward_over_the_loop_budget(device, monkeypatch):
    from rlxpy.wgpu_backend.lowering import reduce as reduce_lowering

    monkeypatch.setattr(reduce_lowering, "LOOP_BUDGET", 316)  # 300 indices per dispatch: 4 dispatches
    idx = np.random.default_rng(14).integers(0, 5, (1000,))
    dy = rand((1000, 33), 15)
    g = rlxpy.Graph("gather_backward_chunks")
    out = g.gather_backward(g.input("dy", dy.shape), g.input("idx", idx.shape, "i32"), 5, 0)
    g.output(out)
    exe = rlxpy.compile(g)
    assert len(exe.schedule.steps) == 4
    want = np.zeros((5, 33))
    np.add.at(want, idx, dy.astype(np.float64))
    assert_close(exe.run({"dy": dy, "idx": idx.astype(np.int32)})[out.name], want, 1e-5, 1e-5, "chunked")


@pytest.mark.parametrize("rows, classes", [(1, 1), (3, 5), (17, 255), (255, 3), (4, 3000)])
def test_cross_entropy_backward_matches_autograd(device, rows, classes):
    logits = rand((rows, classes), 13, low=-5, high=5)
    targets = np.random.default_rng(14).integers(0, classes, rows).astype(np.int32)
    if rows > 2:
        targets[2] = -100
    dy = rand((rows,), 15)
    g = rlxpy.Graph("cross_entropy_backward")
    out = g.cross_entropy_backward(g.input("x", logits.shape), g.input("t", (rows,), "i32"),
                                   g.input("dy", (rows,)))
    g.output(out)
    got = run(g, {"x": logits, "t": targets, "dy": dy})[out.name]
    tx = t64(logits, True)
    F.cross_entropy(tx, torch.from_numpy(targets).long(), reduction="none").backward(t64(dy))
    assert_close(got, tx.grad.numpy(), 1e-5, 1e-6, "cross-entropy backward")


# -- attention -----------------------------------------------------------------------------------

ATTENTION_TOL = (2e-4, 2e-5)


def torch_attention(q, k, v, heads, kv_heads, d, layout, mask_kind="none", mask=None, scale=None,
                    softcap=None, window=0):
    """rlxpy's Attention semantics (ref_attention) in torch, for layouts bhsd, bshd and bs(hd)."""
    def bhsd(t, h):
        if layout == "bshd":
            return t.transpose(1, 2)
        if layout == "bs(hd)":
            return t.reshape(t.shape[0], t.shape[1], h, d).transpose(1, 2)
        return t

    qb, kb, vb = bhsd(q, heads), bhsd(k, kv_heads), bhsd(v, kv_heads)
    group = heads // kv_heads
    kb, vb = kb.repeat_interleave(group, 1), vb.repeat_interleave(group, 1)
    s = qb @ kb.transpose(-1, -2) * (scale if scale is not None else d ** -0.5)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s_q, s_k = s.shape[-2:]
    pos = torch.arange(s_q)[:, None] + (s_k - s_q)
    keys = torch.arange(s_k)[None, :]
    if mask_kind in ("causal", "sliding_window"):
        keep = keys <= pos
        if mask_kind == "sliding_window":
            keep = keep & (keys >= pos - window)
        s = torch.where(keep, s, torch.tensor(-3.4e38, dtype=s.dtype))
    elif mask_kind == "custom":
        m = mask if mask.dim() == 4 else mask[:, None, None, :] if mask.dim() == 2 else mask[:, None]
        s = torch.where(m < 0.5, torch.tensor(-1e9, dtype=s.dtype), s)
    elif mask_kind == "bias":
        m = mask if mask.dim() == 4 else mask[:, None, None, :] if mask.dim() == 2 else mask[:, None]
        s = s + m
    out = torch.softmax(s, -1) @ vb
    if layout == "bshd":
        return out.transpose(1, 2)
    if layout == "bs(hd)":
        return out.transpose(1, 2).reshape(q.shape)
    return out


def _shapes(layout, batch, s_q, s_k, heads, kv_heads, d):
    if layout == "bhsd":
        return (batch, heads, s_q, d), (batch, kv_heads, s_k, d)
    if layout == "bshd":
        return (batch, s_q, heads, d), (batch, s_k, kv_heads, d)
    return (batch, s_q, heads * d), (batch, s_k, kv_heads * d)


ATTENTION_CASES = [
    # batch, s_q, s_k, heads, kv_heads, d, layout, mask_kind, softcap
    (1, 1, 1, 1, 1, 8, "bhsd", "none", None),
    (2, 3, 17, 2, 1, 24, "bshd", "none", None),
    (1, 33, 33, 4, 2, 16, "bs(hd)", "causal", None),
    (1, 40, 17, 2, 2, 8, "bhsd", "causal", None),  # S_q > S_k: the first rows are fully masked
    (2, 17, 40, 2, 2, 8, "bhsd", "sliding_window", 4.0),
    pytest.param((1, 65, 65, 1, 1, 64, "bs(hd)", "causal", None), marks=pytest.mark.gl_deselect),
    # head dims past one 64-dim group of the row products (DG = 2 and 4), a ragged 255-long causal GQA case
    pytest.param((1, 255, 255, 4, 2, 80, "bshd", "causal", None), marks=pytest.mark.gl_deselect),
    pytest.param((1, 3, 17, 1, 1, 200, "bhsd", "none", 2.0), marks=pytest.mark.gl_deselect),
]


def _attention_graph(case, mask_kind=None, mask_shape=None, window=5, scale=None):
    batch, s_q, s_k, heads, kv_heads, d, layout, kind, softcap = case
    kind = mask_kind or kind
    q_shape, k_shape = _shapes(layout, batch, s_q, s_k, heads, kv_heads, d)
    g = rlxpy.Graph("attention_backward")
    q, k, v, dy = g.input("q", q_shape), g.input("k", k_shape), g.input("v", k_shape), g.input("dy", q_shape)
    mask = g.input("mask", mask_shape) if mask_shape else None
    outs = [g.attention_backward(q, k, v, dy, wrt, heads, d, kv_heads, kind, mask, scale, softcap, window)
            for wrt in ("query", "key", "value", "all")]
    g.output(*outs)
    return g, outs, (q_shape, k_shape)


def _check_attention(case, mask_kind=None, mask=None, window=5, scale=None):
    batch, s_q, s_k, heads, kv_heads, d, layout, kind, softcap = case
    mask_shape = None if mask is None else mask.shape
    g, outs, (q_shape, k_shape) = _attention_graph(case, mask_kind, mask_shape, window, scale)
    feeds = {"q": rand(q_shape, 20), "k": rand(k_shape, 21), "v": rand(k_shape, 22), "dy": rand(q_shape, 23)}
    if mask is not None:
        feeds["mask"] = mask
    exe = rlxpy.compile(g)
    kernels = {s.kernel for s in exe.schedule.steps}
    assert kernels == {"backward_attention_stats", "backward_attention_dq", "backward_attention_dkv"}
    got = exe.run(feeds)
    tq, tk, tv = (t64(feeds[n], True) for n in "qkv")
    tmask = t64(mask) if mask is not None else None
    torch_attention(tq, tk, tv, heads, kv_heads, d, layout, mask_kind or kind, tmask, scale, softcap,
                    window).backward(t64(feeds["dy"]))
    wants = (tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy())
    for out, want, what in zip(outs, wants, "qkv"):
        assert_close(got[out.name], want, *ATTENTION_TOL, f"d{what}")
    flat = np.concatenate([w.reshape(-1) for w in wants])  # wrt all: dq, dk, dv one after the other
    assert_close(got[outs[3].name], flat, *ATTENTION_TOL, "wrt all")


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=str)
def test_attention_backward_matches_autograd(device, case):
    _check_attention(case)


@pytest.mark.parametrize("mask_shape", [(2, 9), pytest.param((2, 5, 9), marks=pytest.mark.gl_deselect),
                                        pytest.param((2, 2, 5, 9), marks=pytest.mark.gl_deselect)], ids=str)
def test_attention_backward_with_custom_and_bias_masks(device, mask_shape):
    case = (2, 5, 9, 2, 2, 8, "bhsd", "custom", None)
    keep = (np.random.default_rng(24).random(mask_shape) > 0.3).astype(np.float32)
    _check_attention(case, mask=keep, scale=0.4)
    _check_attention(case, mask_kind="bias", mask=rand(mask_shape, 25))


def test_attention_backward_splits_long_work_over_dispatches(device, monkeypatch):
    from rlxpy.wgpu_backend.lowering import reduce as reduce_lowering

    monkeypatch.setattr(reduce_lowering, "LOOP_BUDGET", 300)  # two tiles per dispatch
    case = (1, 70, 70, 2, 1, 8, "bhsd", "causal", None)
    g, _, _ = _attention_graph(case)
    assert len(rlxpy.compile(g).schedule.steps) > 12  # 9 unsplit
    _check_attention(case)


PACKED_CASES = [
    # batch, s, heads, kv_heads, d, layout, mask_kind, softcap (self-attention, token-major)
    (1, 1, 1, 1, 8, "bs(hd)", "none", None),
    (2, 3, 2, 1, 24, "bshd", "none", None),
    (1, 33, 4, 2, 16, "bs(hd)", "causal", None),
    (2, 17, 2, 2, 8, "bshd", "sliding_window", 4.0),
    (1, 255, 4, 2, 80, "bs(hd)", "causal", None),
]


@pytest.mark.parametrize("case", PACKED_CASES, ids=str)
def test_attention_backward_packed_rows_and_given_output(device, case):
    """wrt PACKED (each token's dq | dk | dv side by side) and every wrt with the forward's output o
    given (rowsum(dy * o) read from it), against torch.autograd."""
    batch, s, heads, kv_heads, d, layout, kind, softcap = case
    q_shape, k_shape = _shapes(layout, batch, s, s, heads, kv_heads, d)
    g = rlxpy.Graph("attention_backward_packed")
    q, k, v, dy = g.input("q", q_shape), g.input("k", k_shape), g.input("v", k_shape), g.input("dy", q_shape)
    o = g.attention(q, k, v, heads, d, kv_heads, kind, softcap=softcap, window=5)
    outs = [g.attention_backward(q, k, v, dy, wrt, heads, d, kv_heads, kind, None, None, softcap, 5, output=o)
            for wrt in ("packed", "all", "query", "key")]
    g.output(*outs)
    feeds = {"q": rand(q_shape, 30), "k": rand(k_shape, 31), "v": rand(k_shape, 32), "dy": rand(q_shape, 33)}
    got = run(g, feeds)
    tq, tk, tv = (t64(feeds[n], True) for n in "qkv")
    forward = torch_attention(tq, tk, tv, heads, kv_heads, d, layout, kind, None, None, softcap, 5)
    forward.backward(t64(feeds["dy"]))
    wants = [t.grad.numpy() for t in (tq, tk, tv)]
    rows = np.concatenate([w.reshape(batch, s, -1) for w in wants], axis=-1)
    assert got[outs[0].name].shape == (batch, s, (heads + 2 * kv_heads) * d)
    assert_close(got[outs[0].name], rows, *ATTENTION_TOL, "wrt packed")
    assert_close(got[outs[1].name], np.concatenate([w.reshape(-1) for w in wants]), *ATTENTION_TOL, "wrt all")
    assert_close(got[outs[2].name], wants[0], *ATTENTION_TOL, "dq")
    assert_close(got[outs[3].name], wants[1], *ATTENTION_TOL, "dk")


def test_attention_backward_packed_refuses_head_major_inputs():
    g = rlxpy.Graph("bad_packed")
    q = g.input("q", (1, 2, 5, 8))  # [B, H, S, D]
    with pytest.raises(rlxpy.GraphError, match="PACKED"):
        g.attention_backward(q, q, q, q, "packed", 2, 8)


# -- activations --------------------------------------------------------------------------------

SLOPE_TOL = (2e-6, 2e-6)
TORCH_ACTIVATIONS = {
    "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp, "log": torch.log,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "neg": torch.neg, "abs": torch.abs, "gelu": F.gelu,
    "gelu_approx": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "round": torch.round,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "atan": torch.atan, "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
}


@pytest.mark.parametrize("fn", sorted(TORCH_ACTIVATIONS))
def test_activation_backward_matches_autograd(device, fn):
    x = rand((255, 33), 30, low=-4, high=4)
    if fn in ("log", "sqrt", "rsqrt"):
        x = np.abs(x) + 0.1
    if fn == "tan":
        x = x / 3
    x.reshape(-1)[:4] = [0.0, -0.0, 1e-30, 6.0] if fn not in ("log", "sqrt", "rsqrt") else x.reshape(-1)[:4]
    dy = rand(x.shape, 31)
    g = rlxpy.Graph("activation_backward")
    xi, dyi = g.input("x", x.shape), g.input("dy", x.shape)
    from_input = g.activation_backward(xi, dyi, fn)
    outs = [from_input]
    if fn in ("relu", "sigmoid", "tanh", "exp", "neg", "sqrt", "rsqrt", "tan"):
        outs.append(g.activation_backward(g.activation(xi, fn), dyi, fn, of_output=True))
    g.output(*outs)
    got = run(g, {"x": x, "dy": dy})
    tx = t64(x, True)
    TORCH_ACTIVATIONS[fn](tx).backward(t64(dy))
    for out in outs:
        assert_close(got[out.name], tx.grad.numpy(), *SLOPE_TOL, f"{fn} backward ({out.name})")

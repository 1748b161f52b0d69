"""SelectiveScan and GatedDeltaNet vs plain Python loops and vectorised torch recurrences."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlxpy.errors import GraphError
from rlxpy.ir.graph import Graph
from rlxpy.ir.reference import REFERENCE, run_reference


def _rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _scan_loops(x, delta, a, b, c):
    """Scalar Python loops, one (batch, channel, state) entry at a time."""
    batch, steps, channels = x.shape
    n = a.shape[1]
    y = np.zeros(x.shape)
    for bi in range(batch):
        for ch in range(channels):
            h = [0.0] * n
            for t in range(steps):
                dt = float(delta[bi, t, ch])
                for s in range(n):
                    drive = dt * float(b[bi, t, s]) * float(x[bi, t, ch])
                    h[s] = math.exp(dt * float(a[ch, s])) * h[s] + drive
                y[bi, t, ch] = sum(float(c[bi, t, s]) * h[s] for s in range(n))
    return y


def _scan_torch(x, delta, a, b, c):
    """Discretise all steps at once (as Mamba's reference does), then run the state."""
    x, delta, a, b, c = (torch.from_numpy(t).double() for t in (x, delta, a, b, c))
    decay = torch.exp(delta.unsqueeze(-1) * a)  # [B, S, Hd, N]
    drive = (delta * x).unsqueeze(-1) * b.unsqueeze(2)  # [B, S, Hd, N]
    h = torch.zeros(decay[:, 0].shape, dtype=torch.float64)
    ys = []
    for t in range(x.shape[1]):
        h = decay[:, t] * h + drive[:, t]
        ys.append(torch.einsum("bcn,bn->bc", h, c[:, t]))
    return torch.stack(ys, dim=1).numpy()


def _scan_inputs(batch, steps, channels, n, seed=0):
    x = _rand((batch, steps, channels), seed)
    delta = np.log1p(np.exp(_rand((batch, steps, channels), seed + 1))).astype(np.float32)  # softplus > 0
    a = -np.exp(_rand((channels, n), seed + 2, 0.5)).astype(np.float32)
    return x, delta, a, _rand((batch, steps, n), seed + 3), _rand((batch, steps, n), seed + 4)


def _build_scan(batch, steps, channels, n):
    g = Graph()
    y = g.selective_scan(g.input("x", (batch, steps, channels)), g.input("delta", (batch, steps, channels)),
                         g.param("A", (channels, n)), g.input("b", (batch, steps, n)),
                         g.input("c", (batch, steps, n)))
    g.output(y)
    return g, y


@pytest.mark.parametrize("batch, steps, channels, n", [(1, 1, 1, 1), (2, 3, 5, 4), (1, 17, 3, 16)])
def test_selective_scan_matches_python_loops(batch, steps, channels, n):
    x, delta, a, b, c = _scan_inputs(batch, steps, channels, n)
    g, y = _build_scan(batch, steps, channels, n)
    got = run_reference(g, {"x": x, "delta": delta, "b": b, "c": c}, {"A": a})[y.name]
    np.testing.assert_allclose(got, _scan_loops(x, delta, a, b, c), rtol=1e-5, atol=1e-5)


def test_selective_scan_matches_torch_on_a_longer_sequence():
    x, delta, a, b, c = _scan_inputs(2, 255, 3, 8, seed=7)
    g, y = _build_scan(2, 255, 3, 8)
    got = run_reference(g, {"x": x, "delta": delta, "b": b, "c": c}, {"A": a})[y.name]
    np.testing.assert_allclose(got, _scan_torch(x, delta, a, b, c), rtol=1e-5, atol=1e-5)


def test_selective_scan_propagates_nan_forward_in_time_only():
    x, delta, a, b, c = _scan_inputs(1, 6, 2, 3, seed=3)
    x[0, 3, 1] = np.nan
    g, y = _build_scan(1, 6, 2, 3)
    got = run_reference(g, {"x": x, "delta": delta, "b": b, "c": c}, {"A": a})[y.name]
    want = _scan_torch(x, delta, a, b, c)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.isnan(got[0, 3:, 1]).all()
    assert not np.isnan(got[0, :3]).any() and not np.isnan(got[0, :, 0]).any()


def test_selective_scan_carries_its_state_in_place():
    """With a state, the scan starts from it and writes the final state back (input 5 only): two
    halves through one state equal one scan of the whole sequence from that state."""
    x, delta, a, b, c = _scan_inputs(2, 10, 3, 4, seed=2)
    named = {"x": x, "delta": delta, "b": b, "c": c}
    start = _rand((2, 3, 4), 8)
    g = Graph()
    state, a_node = g.param("state", (2, 3, 4)), g.param("A", (3, 4))
    halves = []
    for part in range(2):
        ins = {nm: g.input(f"{nm}{part}", (2, 5, t.shape[2])) for nm, t in named.items()}
        halves.append(g.selective_scan(ins["x"], ins["delta"], a_node, ins["b"], ins["c"], state=state))
    both = g.concat(halves, axis=1)
    g.output(both)
    feed = {f"{nm}{p}": t[:, 5 * p: 5 * p + 5] for p in range(2) for nm, t in named.items()}
    got = run_reference(g, feed, {"A": a, "state": start.copy()})[both.name]
    np.testing.assert_allclose(got, _scan_loops_from(x, delta, a, b, c, start), rtol=1e-5, atol=1e-5)
    args = [x, delta, a, b, c, start.copy()]
    node = halves[0]
    REFERENCE[type(node.op)](node.op, args, node)
    assert node.op.mutated_inputs() == (5,) and not np.array_equal(args[5], start)


def _scan_loops_from(x, delta, a, b, c, start):
    """_scan_loops from a starting state: the state's effect decays by prod exp(delta * A)."""
    y = _scan_loops(x, delta, a, b, c)
    decay = np.cumprod(np.exp(delta[..., None].astype(np.float64) * a), axis=1)  # [B, S, Hd, N]
    return y + np.einsum("btcn,bcn,btn->btc", decay, start.astype(np.float64), c.astype(np.float64))


def test_selective_scan_shape_errors():
    g = Graph()
    x = g.input("x", (1, 4, 3))
    with pytest.raises(GraphError, match=r"ss \(SelectiveScan\): A must be \[Hd=3, N=5\]"):
        g.selective_scan(x, x, g.param("A", (2, 5)), g.input("b", (1, 4, 5)), g.input("c", (1, 4, 5)),
                         name="ss")
    with pytest.raises(GraphError, match=r"Bm and Cm must be \[1, 4, 2\]"):
        g.selective_scan(x, x, g.param("A2", (3, 2)), g.input("b2", (1, 4, 3)), g.input("c2", (1, 4, 2)))
    with pytest.raises(GraphError, match="state_size 300 must be in 1..256"):
        wide = g.input("b3", (1, 4, 300))
        g.selective_scan(x, x, g.param("A3", (3, 300)), wide, wide)
    bc = g.input("bc", (1, 4, 2))
    with pytest.raises(GraphError, match=r"state must be \[1, 3, 2\], got f32\[1, 2, 3\]"):
        g.selective_scan(x, x, g.param("A4", (3, 2)), bc, bc, state=g.param("s", (1, 2, 3)))


def _delta_rule_loops(q, k, v, g, beta, state=None):
    """Per (batch, head) Python loops over an N x N list-of-lists state, element by element."""
    batch, steps, heads, n = q.shape
    out = np.zeros(q.shape)
    final = np.zeros((batch, heads, n, n))
    for bi in range(batch):
        for h in range(heads):
            s = [[0.0 if state is None else float(state[bi, h, i, j]) for j in range(n)] for i in range(n)]
            for t in range(steps):
                decay = math.exp(float(g[bi, t, h]))
                s = [[decay * s[i][j] for j in range(n)] for i in range(n)]
                kt, vt, qt = k[bi, t, h], v[bi, t, h], q[bi, t, h]
                sk = [sum(s[i][j] * float(kt[i]) for i in range(n)) for j in range(n)]
                d = [(float(vt[j]) - sk[j]) * float(beta[bi, t, h]) for j in range(n)]
                s = [[s[i][j] + float(kt[i]) * d[j] for j in range(n)] for i in range(n)]
                for j in range(n):
                    out[bi, t, h, j] = sum(s[i][j] * float(qt[i]) for i in range(n)) / math.sqrt(n)
            final[bi, h] = s
    return out, final


def _delta_rule_torch(q, k, v, g, beta, state=None):
    """Head-major torch recurrence in the style of transformers' torch_recurrent_gated_delta_rule."""
    q, k, v, g, beta = (torch.from_numpy(t).double().transpose(1, 2) for t in (q, k, v, g, beta))
    n = q.shape[-1]
    s = torch.zeros(q.shape[0], q.shape[1], n, n, dtype=torch.float64) if state is None else \
        torch.from_numpy(state).double()
    outs = []
    for t in range(q.shape[2]):
        s = s * g[:, :, t].exp()[..., None, None]
        memory = (s * k[:, :, t, :, None]).sum(-2)
        delta = (v[:, :, t] - memory) * beta[:, :, t, None]
        s = s + k[:, :, t, :, None] * delta[..., None, :]
        outs.append((s * q[:, :, t, :, None]).sum(-2) / n**0.5)
    return torch.stack(outs, dim=2).transpose(1, 2).numpy(), s.numpy()


def _delta_inputs(batch, steps, heads, n, seed=0):
    def unit(shape, s):
        t = _rand(shape, s)
        return (t / np.linalg.norm(t, axis=-1, keepdims=True)).astype(np.float32)

    q, k = unit((batch, steps, heads, n), seed), unit((batch, steps, heads, n), seed + 1)
    v = _rand((batch, steps, heads, n), seed + 2)
    g = -np.abs(_rand((batch, steps, heads), seed + 3, 0.5))
    beta = (1.0 / (1.0 + np.exp(-_rand((batch, steps, heads), seed + 4)))).astype(np.float32)
    return q, k, v, g, beta


def _build_delta(shape, carry):
    batch, steps, heads, n = shape
    gr = Graph()
    names = ["q", "k", "v"]
    ins = [gr.input(nm, shape) for nm in names] + [gr.input("g", shape[:3]), gr.input("beta", shape[:3])]
    state = gr.param("state", (batch, heads, n, n)) if carry else None
    out = gr.gated_delta_net(*ins, state=state)
    gr.output(out)
    return gr, out


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 2, 4), (1, 17, 3, 5)])
def test_gated_delta_net_matches_python_loops(shape):
    q, k, v, g, beta = _delta_inputs(*shape)
    gr, out = _build_delta(shape, carry=False)
    got = run_reference(gr, {"q": q, "k": k, "v": v, "g": g, "beta": beta})[out.name]
    want, _ = _delta_rule_loops(q, k, v, g, beta)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gated_delta_net_carries_state_like_torch():
    shape = (2, 9, 3, 8)
    q, k, v, g, beta = _delta_inputs(*shape, seed=5)
    state = _rand((2, 3, 8, 8), 11, 0.3)
    gr, out = _build_delta(shape, carry=True)
    got = run_reference(gr, {"q": q, "k": k, "v": v, "g": g, "beta": beta}, {"state": state})[out.name]
    want, want_state = _delta_rule_torch(q, k, v, g, beta, state)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    loops, loops_state = _delta_rule_loops(q, k, v, g, beta, state)
    np.testing.assert_allclose(want, loops, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(want_state, loops_state, rtol=1e-9, atol=1e-9)


def test_gated_delta_net_updates_the_state_for_later_readers():
    """Splitting a sequence in two with a carried state equals one pass over the whole sequence."""
    shape = (1, 6, 2, 4)
    q, k, v, g, beta = _delta_inputs(*shape, seed=9)
    gr = Graph()
    state = gr.param("state", (1, 2, 4, 4))
    halves = []
    for part in range(2):
        sl = slice(3 * part, 3 * part + 3)
        ins = [gr.input(f"{nm}{part}", t[:, sl].shape) for nm, t in zip("qkv", (q, k, v))]
        ins += [gr.input(f"g{part}", g[:, sl].shape), gr.input(f"beta{part}", beta[:, sl].shape)]
        halves.append(gr.gated_delta_net(*ins, state=state))
    both = gr.concat(halves, axis=1)
    gr.output(both)
    named = dict(zip(("q", "k", "v", "g", "beta"), (q, k, v, g, beta)))
    feed = {f"{nm}{p}": t[:, 3 * p: 3 * p + 3] for p in range(2) for nm, t in named.items()}
    user_state = np.zeros((1, 2, 4, 4), np.float32)
    got = run_reference(gr, feed, {"state": user_state})[both.name]
    want, _ = _delta_rule_torch(q, k, v, g, beta)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not user_state.any(), "the caller's array must not be mutated"


def test_gated_delta_net_shape_errors():
    gr = Graph()
    q = gr.input("q", (1, 4, 2, 8))
    gate = gr.input("g", (1, 4, 2))
    with pytest.raises(GraphError, match=r"gdn \(GatedDeltaNet\): g and beta must be \[1, 4, 2\]"):
        gr.gated_delta_net(q, q, q, gate, gr.input("b", (1, 4, 3)), name="gdn")
    with pytest.raises(GraphError, match=r"state must be \[1, 2, 8, 8\]"):
        gr.gated_delta_net(q, q, q, gate, gate, state=gr.param("s", (1, 2, 8, 4)))
    with pytest.raises(GraphError, match="state_size 200 must be in 1..128"):
        big = gr.input("big", (1, 4, 2, 200))
        gr.gated_delta_net(big, big, big, gate, gate)
    with pytest.raises(GraphError, match="must share one shape"):
        gr.gated_delta_net(q, q, gr.input("v", (1, 4, 2, 4)), gate, gate)

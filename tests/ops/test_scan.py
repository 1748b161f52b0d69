"""Scan family on the GPU: SelectiveScan (chunked scan, carried state) and GatedDeltaNet (carried state,
multi-dispatch sequences) against the numpy reference and plain float64 torch recurrences."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import KERNEL_VARIANTS
from helpers import assert_close

import rlxpy
from rlxpy import env
from rlxpy.errors import UnsupportedOpError
from rlxpy.ir import ops
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend import arena
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.lowering import scan as scan_lowering
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import SCRATCH, DeviceFacts

#: GPU f32 vs float64: the scan's rounding grows with |y| (a sum of N state products per step).
SCAN_TOL = (2e-4, 2e-4)


@pytest.fixture(params=KERNEL_VARIANTS)
def variant(request):
    """Both chunkings: the GPU's (many short chunks) and a CPU adapter's (few long ones)."""
    with env.override(RLX_WGPU_KERNELS=request.param):
        yield request.param


def scan_torch(x, delta, a, b, c, state=None):
    """Oracle: discretise every step at once, then run the recurrence in float64 torch."""
    x, delta, a, b, c = (torch.from_numpy(t).double() for t in (x, delta, a, b, c))
    decay = torch.exp(delta.unsqueeze(-1) * a)  # [B, S, Hd, N]
    drive = (delta * x).unsqueeze(-1) * b.unsqueeze(2)
    h = torch.zeros(decay[:, 0].shape, dtype=torch.float64)
    if state is not None:
        h = torch.from_numpy(state).double()
    ys = []
    for t in range(x.shape[1]):
        h = decay[:, t] * h + drive[:, t]
        ys.append((h * c[:, t, None, :]).sum(-1))
    return torch.stack(ys, dim=1).numpy(), h.numpy()


def scan_inputs(batch, steps, channels, n, seed=0):
    r = np.random.default_rng(seed)
    x = r.standard_normal((batch, steps, channels)).astype(np.float32)
    delta = np.log1p(np.exp(r.standard_normal((batch, steps, channels)))).astype(np.float32)  # softplus
    a = -np.exp(0.5 * r.standard_normal((channels, n))).astype(np.float32)
    b, c = (r.standard_normal((batch, steps, n)).astype(np.float32) for _ in range(2))
    return {"x": x, "delta": delta, "b": b, "c": c}, a


def build_scan(batch, steps, channels, n, carry=False, name="y"):
    g = rlxpy.Graph("scan")
    state = g.param("state", (batch, channels, n)) if carry else None
    y = g.selective_scan(g.input("x", (batch, steps, channels)), g.input("delta", (batch, steps, channels)),
                         g.param("A", (channels, n)), g.input("b", (batch, steps, n)),
                         g.input("c", (batch, steps, n)), state=state, name=name)
    g.output(y)
    return g


def run_scan(feeds, a, carry_state=None):
    batch, steps, channels = feeds["x"].shape
    g = build_scan(batch, steps, channels, a.shape[1], carry=carry_state is not None)
    exe = rlxpy.compile(g)
    exe.set_param("A", a)
    if carry_state is not None:
        exe.set_param("state", carry_state)
    return g, exe, exe.run(feeds)["y"]


@pytest.mark.parametrize("batch, steps, channels, n", [
    (1, 1, 1, 1), (2, 3, 5, 16), (1, 17, 33, 1), (1, 255, 5, 64), (2, 1000, 33, 16)])
def test_selective_scan_matches_reference_and_torch(device, variant, batch, steps, channels, n):
    feeds, a = scan_inputs(batch, steps, channels, n, seed=steps)
    g, exe, got = run_scan(feeds, a)
    assert {s.kind for s in exe.schedule.steps} == {"gpu"}, "no host steps"
    ref = run_reference(g, feeds, {"A": a})["y"]
    want, _ = scan_torch(feeds["x"], feeds["delta"], a, feeds["b"], feeds["c"])
    assert_close(ref, want, 1e-5, 1e-5, "reference vs torch")
    assert_close(got, want, *SCAN_TOL, "GPU vs torch")


def test_selective_scan_matches_transformers_mamba_scan(device):
    """transformers' pure-torch Mamba scan (mamba_selective_scan, channels-first, float64 here) on a
    sequence long enough for the chunked path: y and the final state it returns."""
    from transformers.models.mamba.modeling_mamba import mamba_selective_scan

    feeds, a = scan_inputs(2, 300, 33, 16, seed=9)
    g, exe, got = run_scan(feeds, a, np.zeros((2, 33, 16), np.float32))
    assert len(exe.schedule.steps) == 3
    first = lambda t: torch.from_numpy(t).double().transpose(1, 2)  # noqa: E731  [B, S, C] -> [B, C, S]
    want, state = mamba_selective_scan(first(feeds["x"]), first(feeds["delta"]), torch.from_numpy(a).double(),
                                       first(feeds["b"]), first(feeds["c"]), return_last_state=True)
    assert_close(got, want.transpose(1, 2).numpy(), *SCAN_TOL, "GPU vs transformers")
    assert_close(exe.read_node("state"), state.numpy(), *SCAN_TOL, "final state vs transformers")


def test_long_prefill_runs_in_parallel_chunks(device):
    """A 4k-token prefill is three dispatches: the invocations (lanes x chunks) fill an H100."""
    g = build_scan(1, 4096, 1536, 16)
    steps = lower_graph(prepare(g), DeviceFacts()).steps
    assert [s.kernel for s in steps] == ["scan_selective", "scan_selective_carry", "scan_selective"]
    chunk = scan_lowering.chunk_length(4096, 1536, 16, cpu=False)
    assert 1536 * math.ceil(4096 / chunk) >= scan_lowering.TARGET_INVOCATIONS
    assert chunk * 17 < LOOP_BUDGET


def test_selective_scan_propagates_nan_and_inf_forward_in_time(device, variant):
    feeds, a = scan_inputs(1, 70, 4, 8, seed=3)
    feeds["x"][0, 20, 1] = np.nan
    feeds["delta"][0, 40, 2] = np.inf  # exp(inf * A) = 0 forgets the past, inf * x drives inf/NaN
    feeds["b"][0, 50, 3] = -np.inf
    _, _, got = run_scan(feeds, a)
    want, _ = scan_torch(feeds["x"], feeds["delta"], a, feeds["b"], feeds["c"])
    assert_close(got, want, *SCAN_TOL, "GPU vs torch with NaN/inf")
    assert np.isnan(got[0, 20:, 1]).all() and not np.isnan(got[0, :20, 1]).any()
    assert not np.isnan(got[0, :, 0]).any()


def test_carried_state_prefill_then_decode_steps(device, variant):
    """Prefill 37 tokens from a given state, then 3 single-token decode steps, each continuing from the
    state the previous run left: the outputs and final state equal one scan over all 40 tokens."""
    batch, channels, n = 2, 5, 16
    feeds, a = scan_inputs(batch, 40, channels, n, seed=11)
    start = np.random.default_rng(5).standard_normal((batch, channels, n)).astype(np.float32)
    want, want_state = scan_torch(feeds["x"], feeds["delta"], a, feeds["b"], feeds["c"], start)

    g, prefill, got = run_scan({k: v[:, :37] for k, v in feeds.items()}, a, start)
    assert_close(got, want[:, :37], *SCAN_TOL, "prefill")
    decode = rlxpy.compile(build_scan(batch, 1, channels, n, carry=True))
    decode.set_param("A", a)
    decode.set_param("state", prefill.read_node("state"))
    kernels = [s.kernel for s in decode.schedule.steps]
    assert kernels == ["scan_selective"], "a decode step is one dispatch"
    for t in range(37, 40):
        got = decode.run({k: v[:, t:t + 1] for k, v in feeds.items()})["y"]
        assert_close(got, want[:, t:t + 1], *SCAN_TOL, f"decode step {t}")
    assert_close(decode.read_node("state"), want_state, *SCAN_TOL, "final state")


def test_selective_scan_refuses_f16_naming_the_node(device):
    g = rlxpy.Graph("half")
    x, bc = g.input("x", (1, 4, 3), "f16"), g.input("bc", (1, 4, 2), "f16")
    g.output(g.selective_scan(x, x, g.param("A", (3, 2), "f16"), bc, bc, name="ssm"))
    with pytest.raises(UnsupportedOpError, match=r"ssm \(SelectiveScan\): scan_selective is lowered for f32"):
        rlxpy.compile(g)


def delta_torch(q, k, v, g, beta, state=None):
    """Oracle: the gated delta rule as a float64 torch loop over time, heads batched."""
    q, k, v, g, beta = (torch.from_numpy(t).double() for t in (q, k, v, g, beta))
    batch, steps, heads, n = q.shape
    s = torch.zeros(batch, heads, n, n, dtype=torch.float64)
    if state is not None:
        s = torch.from_numpy(state).double()
    outs = []
    for t in range(steps):
        s = s * torch.exp(g[:, t])[..., None, None]
        recalled = torch.einsum("bhij,bhi->bhj", s, k[:, t])
        d = (v[:, t] - recalled) * beta[:, t, :, None]
        s = s + k[:, t, :, :, None] * d[:, :, None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[:, t]) / n ** 0.5)
    return torch.stack(outs, dim=1).numpy(), s.numpy()


def delta_inputs(batch, steps, heads, n, seed=0):
    r = np.random.default_rng(seed)

    def unit(shape):
        t = r.standard_normal(shape)
        return (t / np.linalg.norm(t, axis=-1, keepdims=True)).astype(np.float32)

    return {"q": unit((batch, steps, heads, n)), "k": unit((batch, steps, heads, n)),
            "v": r.standard_normal((batch, steps, heads, n)).astype(np.float32),
            "g": -np.abs(0.5 * r.standard_normal((batch, steps, heads))).astype(np.float32),
            "beta": (1.0 / (1.0 + np.exp(-r.standard_normal((batch, steps, heads))))).astype(np.float32)}


def build_delta(batch, steps, heads, n, carry=False):
    g = rlxpy.Graph("delta")
    ins = [g.input(nm, (batch, steps, heads, n)) for nm in "qkv"]
    ins += [g.input(nm, (batch, steps, heads)) for nm in ("g", "beta")]
    state = g.param("state", (batch, heads, n, n)) if carry else None
    g.output(g.gated_delta_net(*ins, state=state, name="o"))
    return g


@pytest.mark.parametrize("batch, steps, heads, n",
                         [(1, 1, 1, 1), (2, 3, 2, 4), (1, 17, 3, 5), (1, 255, 2, 128)])
def test_gated_delta_net_matches_reference_and_torch(device, batch, steps, heads, n):
    """Columns of the state per lane; 255 steps of N = 128 take three dispatches (state in scratch)."""
    feeds = delta_inputs(batch, steps, heads, n, seed=n)
    g = build_delta(batch, steps, heads, n)
    exe = rlxpy.compile(g)
    got = exe.run(feeds)["o"]
    assert {s.kind for s in exe.schedule.steps} == {"gpu"}, "no host steps"
    if steps * n > LOOP_BUDGET:
        assert len(exe.schedule.steps) > 1
    want, _ = delta_torch(*feeds.values())
    assert_close(run_reference(g, feeds)["o"], want, 1e-5, 1e-5, "reference vs torch")
    assert_close(got, want, 1e-5, 1e-5, "GPU vs torch")


def test_gated_delta_net_nan_stays_in_its_head_and_after_its_step(device):
    feeds = delta_inputs(1, 9, 3, 8, seed=4)
    feeds["v"][0, 4, 1, 2] = np.nan  # column 2 of head 1 from step 4 on; d = NaN spreads to S[:, 2] only
    feeds["g"][0, 6, 2] = -np.inf  # exp(-inf) = 0: head 2 forgets its past at step 6
    got = rlxpy.compile(build_delta(1, 9, 3, 8)).run(feeds)["o"]
    want, _ = delta_torch(*feeds.values())
    assert_close(got, want, 1e-5, 1e-5, "GPU vs torch with NaN / -inf")
    assert np.isnan(got[0, 4:, 1, 2]).all() and not np.isnan(got[0, :4]).any()
    assert not np.isnan(got[0, :, [0, 2]]).any()


def test_gated_delta_net_decode_steps_carry_the_state(device):
    """Prefill 40 steps then 2 single-step decodes, each one dispatch updating the state in place."""
    batch, heads, n = 2, 3, 16
    feeds = delta_inputs(batch, 42, heads, n, seed=6)
    start = (0.3 * np.random.default_rng(2).standard_normal((batch, heads, n, n))).astype(np.float32)
    want, want_state = delta_torch(*feeds.values(), state=start)
    prefill = rlxpy.compile(build_delta(batch, 40, heads, n, carry=True))
    prefill.set_param("state", start)
    got = prefill.run({k: v[:, :40] for k, v in feeds.items()})["o"]
    assert_close(got, want[:, :40], 1e-5, 1e-5, "prefill")
    decode = rlxpy.compile(build_delta(batch, 1, heads, n, carry=True))
    decode.set_param("state", prefill.read_node("state"))
    assert [s.kernel for s in decode.schedule.steps] == ["scan_gated_delta"]
    for t in (40, 41):
        got = decode.run({k: v[:, t:t + 1] for k, v in feeds.items()})["o"]
        assert_close(got, want[:, t:t + 1], 1e-5, 1e-5, f"decode step {t}")
    assert_close(decode.read_node("state"), want_state, 1e-5, 1e-5, "final state")


def test_gated_delta_net_carries_its_state_across_runs(device):
    """The carried state is updated in place: two runs equal one run over both halves."""
    b, s, h, n = 1, 4, 2, 3

    def inputs(seed):
        r = np.random.default_rng(seed)
        q, k = (r.standard_normal((b, s, h, n)).astype(np.float32) for _ in range(2))
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        return {"q": q, "k": k, "v": r.standard_normal((b, s, h, n)).astype(np.float32),
                "g": -r.uniform(0.1, 0.5, (b, s, h)).astype(np.float32),
                "beta": r.uniform(0.2, 0.9, (b, s, h)).astype(np.float32)}

    def build(steps):
        g = rlxpy.Graph()
        ins = [g.input(name, shape) for name, shape in (("q", (b, steps, h, n)), ("k", (b, steps, h, n)),
                                                        ("v", (b, steps, h, n)), ("g", (b, steps, h)),
                                                        ("beta", (b, steps, h)))]
        g.output(g.gated_delta_net(*ins, state=g.param("state", [b, h, n, n]), name="o"))
        return g

    first, second = inputs(1), inputs(2)
    exe = rlxpy.compile(build(s))
    exe.set_param("state", np.zeros((b, h, n, n), np.float32))
    exe.run(first)
    got = exe.run(second)["o"]
    whole = {k: np.concatenate([first[k], second[k]], axis=1) for k in first}
    g2 = build(2 * s)
    want = run_reference(g2, whole, {"state": np.zeros((b, h, n, n), np.float32)})["o"][:, s:]
    assert_close(got, want, 1e-4, 1e-5, "second half after a carried state")


@pytest.mark.parametrize("op", ["selective_scan", "gated_delta_net"])
def test_without_scratch_the_op_runs_as_a_host_step(device, monkeypatch, op):
    """A chunked scan (or a delta rule over several dispatches) needs scratch; where the arena offers
    none for it the node runs as a host step with the same results."""
    op_type = ops.SelectiveScan if op == "selective_scan" else ops.GatedDeltaNet
    monkeypatch.setitem(SCRATCH, op_type, lambda node, graph: 0)
    monkeypatch.setattr(arena, "SCRATCH_MIN", 0)
    if op == "selective_scan":
        feeds, a = scan_inputs(1, 300, 5, 16, seed=4)
        g, exe, got = run_scan(feeds, a)
        params = {"A": a}
    else:
        feeds, params = delta_inputs(1, 300, 2, 128, seed=4), {}
        g = build_delta(1, 300, 2, 128)
        exe = rlxpy.compile(g)
        got = exe.run(feeds)["o"]
    assert [s.kind for s in exe.schedule.steps] == ["host"]
    assert_close(got, run_reference(g, feeds, params)[g[g.outputs[0]].name], 1e-6, 1e-6, "host step")

"""Graphs larger than one binding, on the GPU: bind windows, staging copies, gaps.

With RLX_WGPU_MAX_BINDING at 64 KiB, 1 MiB and 16 MiB (applied around compile), graphs sized
against the cap (an MLP with big weights, a chain of element-wise ops, a matmul whose weight sits
beyond the first window) must give bit-identical results to the same graph compiled without the
cap, and match a torch / numpy oracle. One real test runs an arena larger than lavapipe's true
128 MiB binding limit. The dispatch report must count the staged bytes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import TOL, assert_close, rand

import rlxpy
from rlxpy import env
from rlxpy.errors import LimitError

KIB, MIB = 1 << 10, 1 << 20
CAPS = [64 * KIB, 1 * MIB, 16 * MIB]


def compile_pair(g: rlxpy.Graph, cap: int, params: dict[str, np.ndarray]):
    """The graph compiled under the cap and without it, with the same params."""
    with env.override(RLX_WGPU_MAX_BINDING=cap):
        capped = rlxpy.compile(g)
    free = rlxpy.compile(g)
    for exe in (capped, free):
        for name, value in params.items():
            exe.set_param(name, value)
    return capped, free


def check_windows(exe, cap: int, staged: bool = True) -> dict:
    """Every GPU step binds an aligned window of at most ``cap`` bytes; the report counts staging."""
    schedule = exe.schedule
    assert schedule.window_size <= cap and schedule.arena.size > cap
    for step in schedule.steps:
        if step.kind == "gpu":
            assert step.window[1] == schedule.window_size and step.window[0] % exe.device.storage_align == 0
            assert step.window[0] + step.window[1] <= exe.arena.size
    summary = exe.report().summary
    assert summary["windows"] > 1
    if staged:
        assert summary["staged_mib"] > 0 and summary["steps_by_kind"].get("C", 0) + sum(
            s.kernel == "elementwise_copy_words" for s in schedule.steps) > 0
        assert "staged" in exe.report().text(2)
    return summary


def same_results(capped, free, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    got, want = capped.run(feeds), free.run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name}: capped vs uncapped")
    return got


def torch_linear(x, w, b=None, act=None):
    y = torch.from_numpy(x) @ torch.from_numpy(w)
    if b is not None:
        y = y + torch.from_numpy(b)
    return act(y) if act is not None else y


# -- an MLP whose weights are each a large part of one binding --------------------------------------
@pytest.mark.parametrize("cap", CAPS)
def test_mlp_with_big_weights_matches_uncapped_and_torch(device, cap):
    scale = {64 * KIB: 1, MIB: 4, 16 * MIB: 16}[cap]
    d0, d1, d2, d3 = 64 * scale, 160 * scale, 80 * scale, 17  # w2 takes 0.78 of a binding
    g = rlxpy.Graph("big_mlp")
    x = g.input("x", [3, d0])
    h1 = g.linear(x, g.param("w1", [d0, d1]), g.param("b1", [d1]), activation="gelu", name="h1")
    h2 = g.relu(g.matmul(h1, g.param("w2", [d1, d2])), name="h2")
    y = g.matmul(h2, g.param("w3", [d2, d3]), name="y")
    g.output(y, h1)
    params = {"w1": rand((d0, d1), 1) / 8, "b1": rand((d1,), 2), "w2": rand((d1, d2), 3) / 8,
              "w3": rand((d2, d3), 4) / 8}
    capped, free = compile_pair(g, cap, params)
    check_windows(capped, cap)
    xv = rand((3, d0), 5)
    xv[0, 0] = np.nan  # NaN propagates through staged copies like anywhere else
    out = same_results(capped, free, {"x": xv})
    h1_t = torch_linear(xv, params["w1"], params["b1"], torch.nn.functional.gelu)
    h2_t = torch.relu(h1_t @ torch.from_numpy(params["w2"]))
    y_t = (h2_t @ torch.from_numpy(params["w3"])).numpy()
    assert np.isnan(out["y"][0]).all() and not np.isnan(out["y"][1:]).any()
    assert_close(out["y"][1:], y_t[1:], *TOL["matmul"], what="y")
    assert_close(out["h1"][1:], h1_t.numpy()[1:], *TOL["matmul"], what="h1")


# -- a chain of element-wise ops over tensors of about a quarter of the cap --------------------------
@pytest.mark.parametrize("cap", CAPS)
def test_elementwise_chain_matches_uncapped_and_numpy(device, cap):
    n = cap // 4 // 4 + 17  # a little over a quarter of the cap: a node's three tensors still fit one window
    g = rlxpy.Graph("ew_chain")
    a, b, c, d = (g.input(k, [n]) for k in "abcd")
    t1 = g.add(a, b, name="t1")
    t2 = g.mul(g.relu(t1), c, name="t2")
    t3 = g.sub(t2, d, name="t3")
    t4 = g.add(g.tanh(t3), a, name="t4")
    t5 = g.mul(t4, g.activation(b, "neg"), name="t5")
    g.output(t5, t2)
    capped, free = compile_pair(g, cap, {})
    check_windows(capped, cap)
    feeds = {k: rand((n,), i + 10) for i, k in enumerate("abcd")}
    feeds["a"][[0, 5]] = [np.inf, np.nan]
    out = same_results(capped, free, feeds)
    fa, fb, fc, fd = (feeds[k].astype(np.float64) for k in "abcd")
    with np.errstate(invalid="ignore"):
        e2 = np.maximum(fa + fb, 0) * fc
        e5 = (np.tanh(e2 - fd) + fa) * -fb
    assert_close(out["t2"], e2.astype(np.float32), *TOL["elementwise"], what="t2")
    assert_close(out["t5"], e5.astype(np.float32), *TOL["transcendental"], what="t5")
    part = capped.run(feeds, outputs=["t2"])  # a partial run keeps each node's staging steps
    np.testing.assert_array_equal(part["t2"], out["t2"])


# -- a matmul whose weight sits beyond the first window ----------------------------------------------
@pytest.mark.parametrize("rows,kernel", [(3, "matmul_skinny"), (40, "matmul_tiled")])
@pytest.mark.parametrize("cap", CAPS)
def test_matmul_weight_beyond_the_first_window(device, cap, rows, kernel):
    n = cap // 4 * 3 // 10  # four 0.3-cap params fill more than the first window
    g = rlxpy.Graph("far_weight")
    p = [g.param(f"p{i}", [n]) for i in range(4)]
    e = g.add(g.mul(p[0], p[1]), g.mul(p[2], p[3]), name="e")
    x = g.input("x", [rows, 64])
    w = g.param("w", [64, 33])
    y = g.linear(x, w, g.param("bias", [33]), activation="relu", name="y")
    g.output(y, e)
    params = {f"p{i}": rand((n,), 20 + i) for i in range(4)}
    params.update(w=rand((64, 33), 30), bias=rand((33,), 31))
    capped, free = compile_pair(g, cap, params)
    summary = check_windows(capped, cap)
    schedule = capped.schedule
    assert schedule.node_offset(capped.graph["w"].id) >= schedule.window_size, "w is beyond the first window"
    matmul = [s for s in schedule.steps if s.kernel == kernel]
    assert matmul and all(s.window[0] > 0 for s in matmul)
    assert summary["arena_mib"] * MIB > cap
    xv = rand((rows, 64), 32)
    out = same_results(capped, free, {"x": xv})
    want = torch_linear(xv, params["w"], params["bias"], torch.relu).numpy()
    assert_close(out["y"], want, *TOL["matmul"], what="y")
    expect_e = params["p0"] * params["p1"] + params["p2"] * params["p3"]
    assert_close(out["e"], expect_e, *TOL["elementwise"], what="e")


def test_op_whose_own_tensors_exceed_the_cap_is_a_clear_limit_error(device):
    g = rlxpy.Graph("too_big")
    x = g.input("x", [4, 128])
    g.output(g.matmul(x, g.input("w", [128, 128]), name="proj"))  # a param would run as its f16 shadow
    message = r"proj \(MatMul\): its tensors need 0\.066 MiB .*w 0\.062 MiB.*at most 0\.062 MiB"
    with env.override(RLX_WGPU_MAX_BINDING=64 * KIB), pytest.raises(LimitError, match=message):
        rlxpy.compile(g)


# -- a real arena beyond lavapipe's 128 MiB binding limit -------------------------------------------
def test_arena_beyond_the_device_binding_limit_matches_numpy(device):
    """No env cap: W is the device's own limit. Four 34 MiB params and two sums make an arena far past
    it; ``s = p0 + p3`` needs a gap and transfer-buffer copies, the matmul weight lies past W."""
    limit = device.limits["max-storage-buffer-binding-size"]
    n = (limit // 4 + (1 << 20)) // 4  # a little over a quarter of the limit per tensor
    g = rlxpy.Graph("huge")
    p = [g.param(f"p{i}", [n]) for i in range(4)]
    s = g.add(p[0], p[3], name="s")
    t = g.sub(p[1], p[2], name="t")
    x = g.input("x", [1, 512])
    y = g.matmul(x, g.param("w", [512, 96]), name="y")
    g.output(y, s, t)
    exe = rlxpy.compile(g)
    schedule = exe.schedule
    assert schedule.window_size == limit // exe.device.storage_align * exe.device.storage_align
    assert exe.arena.size > limit and schedule.node_offset(exe.graph["w"].id) >= schedule.window_size
    ramp = np.arange(n, dtype=np.float32)
    values = {f"p{i}": np.sin(ramp * (i + 1) * 1e-3).astype(np.float32) for i in range(4)}
    values["w"] = rand((512, 96), 40)
    for name, value in values.items():
        exe.set_param(name, value)
    xv = rand((1, 512), 41)
    out = exe.run({"x": xv})
    np.testing.assert_array_equal(out["s"], values["p0"] + values["p3"])
    np.testing.assert_array_equal(out["t"], values["p1"] - values["p2"])
    assert_close(out["y"], xv.astype(np.float64) @ values["w"].astype(np.float64), *TOL["matmul"], what="y")
    summary = exe.report().summary
    assert summary["staged_mib"] > 2 * n * 4 / MIB * 0.99 and summary["steps_by_kind"].get("C", 0) >= 2
    assert schedule.arena.gaps


DEVICE_CAP_SCRIPT = """
import numpy as np, rlxpy
from rlxpy.wgpu_backend.device import get_device
limit = get_device().limits["max-storage-buffer-binding-size"]
assert limit == 65536, limit
n = 4113
g = rlxpy.Graph("device_cap")
a, b, c = (g.input(k, [n]) for k in "abc")
t = g.mul(g.add(a, b), c)
g.output(g.add(g.sub(t, a), b, name="y"))
exe = rlxpy.compile(g)
feeds = {k: np.random.default_rng(i).standard_normal(n).astype(np.float32) for i, k in enumerate("abc")}
y = exe.run(feeds)["y"]
want = (feeds["a"] + feeds["b"]) * feeds["c"] - feeds["a"] + feeds["b"]
np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
summary = exe.report().summary
assert summary["windows"] > 1 and summary["staged_mib"] > 0, summary
print("ok")
"""


def test_env_cap_at_device_creation_is_enforced_by_wgpu(device):
    """RLX_WGPU_MAX_BINDING set before the device exists goes into required_limits, so wgpu itself
    rejects any binding past the cap: a staged schedule under it must still validate and match."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env_vars = {**os.environ, "RLX_WGPU_MAX_BINDING": str(64 * KIB)}
    done = subprocess.run([sys.executable, "-c", DEVICE_CAP_SCRIPT], env=env_vars, capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]

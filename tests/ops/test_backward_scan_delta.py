"""GatedDeltaNetBackward on the GPU against torch.autograd (float64, through a plain torch loop of the
gated delta rule, on the same f32 inputs) and the numpy reference, on odd shapes (B 1/2, S 1/3/17,
heads 1/3, N 1/4/16/33), over several dispatches, and with a NaN input.

f32 tolerance DELTA_TOL (rtol 1e-4, atol 1e-4): each gradient sums S steps of N-long dot products."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_close

import rlxpy
from rlxpy.ir import ops
from rlxpy.ir.reference import run_reference

DELTA_TOL = (1e-4, 1e-4)
NAMES = ("q", "k", "v", "g", "beta")


def delta_inputs(batch: int, steps: int, heads: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Qwen3-Next-like values: q, k L2-normalised rows, g a negative log-gate, beta in (0, 1)."""
    rng = np.random.default_rng(seed)
    shape = (batch, steps, heads, n)

    def unit(x):
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    return {"q": unit(rng.standard_normal(shape)), "k": unit(rng.standard_normal(shape)),
            "v": rng.standard_normal(shape).astype(np.float32),
            "g": (-np.abs(rng.standard_normal(shape[:3]) * 0.5)).astype(np.float32),
            "beta": (1.0 / (1.0 + np.exp(-rng.standard_normal(shape[:3])))).astype(np.float32),
            "dy": rng.standard_normal(shape).astype(np.float32)}


def torch_gradients(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    q, k, v, g, beta = (torch.from_numpy(arrays[name]).double().requires_grad_() for name in NAMES)
    batch, steps, heads, n = q.shape
    s = torch.zeros(batch, heads, n, n, dtype=torch.float64)
    outs = []
    for t in range(steps):
        s = s * torch.exp(g[:, t])[:, :, None, None]
        d = (v[:, t] - torch.einsum("bhij,bhi->bhj", s, k[:, t])) * beta[:, t, :, None]
        s = s + k[:, t, :, :, None] * d[:, :, None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[:, t]) / np.sqrt(n))
    (torch.stack(outs, 1) * torch.from_numpy(arrays["dy"]).double()).sum().backward()
    return [t.grad.numpy() for t in (q, k, v, g, beta)]


def run_gpu(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The five gradients from the GPU (no host step), after checking the flat output vs the reference."""
    g = rlxpy.Graph("delta_backward")
    nodes = [g.input(name, value.shape) for name, value in arrays.items()]
    out = g.apply(ops.GatedDeltaNetBackward(arrays["q"].shape[-1]), nodes, "ddelta")
    g.output(out)
    exe = rlxpy.compile(g)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    got = exe.run(arrays)[out.name]
    assert_close(got, run_reference(g, arrays)[out.name], *DELTA_TOL, "GPU vs reference")
    parts, start = [], 0
    for name in NAMES:
        size = arrays[name].size
        parts.append(got[start:start + size].reshape(arrays[name].shape))
        start += size
    assert start == got.size
    return parts


CASES = [(1, 1, 1, 1), (2, 3, 3, 4), (1, 17, 1, 16), (2, 17, 3, 4), (1, 3, 2, 33)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_gated_delta_net_backward_matches_autograd(device, case):
    arrays = delta_inputs(*case)
    for name, got, want in zip(NAMES, run_gpu(arrays), torch_gradients(arrays), strict=True):
        assert_close(got, want, *DELTA_TOL, f"d{name} vs torch.autograd")


def test_gated_delta_net_backward_over_several_dispatches(device, monkeypatch):
    from rlxpy.wgpu_backend.lowering import reduce as reduce_lowering

    monkeypatch.setattr(reduce_lowering, "LOOP_BUDGET", 2 * 4 + 16 + 3 * 4 * 3)  # 3 steps per dispatch
    arrays = delta_inputs(2, 8, 3, 4, seed=4)
    g = rlxpy.Graph("delta_chunks")
    nodes = [g.input(name, value.shape) for name, value in arrays.items()]
    g.output(g.apply(ops.GatedDeltaNetBackward(4), nodes, "ddelta"))
    steps = rlxpy.compile(g).schedule.steps
    assert [s.kernel for s in steps].count("backward_scan_delta") == 2 * 3, [s.label for s in steps]
    for name, got, want in zip(NAMES, run_gpu(arrays), torch_gradients(arrays), strict=True):
        assert_close(got, want, *DELTA_TOL, f"d{name} vs torch.autograd, chunked")


def test_gated_delta_net_backward_propagates_nan(device):
    arrays = delta_inputs(1, 5, 2, 4, seed=5)
    arrays["v"][0, 2, 1, 3] = np.nan
    got = run_gpu(arrays)  # compared with the reference there, NaN for NaN
    assert np.isnan(got[0]).any() and np.isnan(got[4]).any()

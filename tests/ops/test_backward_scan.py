"""SelectiveScanBackward on the GPU against torch.autograd (float64, through a plain torch loop of
the recurrence, on the same f32 inputs) and the numpy reference, on odd shapes (B 1/2, S 1/3/17/255,
channels 1/5/33, N 1/16/20/256), over several dispatches, and with NaN/inf inputs.

f32 tolerance SCAN_TOL (rtol 1e-4, atol 1e-4): the kernel sums S steps of the adjoint and, for dBm,
dCm and dA, up to channels x steps products in f32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_close

import rlxpy
from rlxpy.ir import ops
from rlxpy.ir.reference import run_reference

SCAN_TOL = (1e-4, 1e-4)
NAMES = ("x", "delta", "A", "Bm", "Cm")


def scan_inputs(batch: int, steps: int, channels: int, states: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Mamba-like values: delta a softplus (positive), A = -exp(A_log) (negative)."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return {
        "x": rng.standard_normal((batch, steps, channels)).astype(f32),
        "delta": np.log1p(np.exp(rng.standard_normal((batch, steps, channels)) * 0.5 - 1.0)).astype(f32),
        "A": (-np.exp(rng.standard_normal((channels, states)) * 0.5)).astype(f32),
        "Bm": rng.standard_normal((batch, steps, states)).astype(f32),
        "Cm": rng.standard_normal((batch, steps, states)).astype(f32),
        "dy": rng.standard_normal((batch, steps, channels)).astype(f32),
    }


def torch_gradients(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """d(sum(y * dy)) / d(x, delta, A, Bm, Cm) of the recurrence written out in torch, float64."""
    x, delta, a, bm, cm = (torch.from_numpy(arrays[k]).double().requires_grad_() for k in NAMES)
    h = torch.zeros(x.shape[0], x.shape[2], a.shape[1], dtype=torch.float64)
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(delta[:, t, :, None] * a) * h + (delta[:, t] * x[:, t])[..., None] * bm[:, t, None, :]
        ys.append((h * cm[:, t, None, :]).sum(-1))
    (torch.stack(ys, 1) * torch.from_numpy(arrays["dy"]).double()).sum().backward()
    return [t.grad.numpy() for t in (x, delta, a, bm, cm)]


def scan_backward(arrays: dict[str, np.ndarray]) -> tuple[rlxpy.Graph, rlxpy.ir.graph.Node]:
    g = rlxpy.Graph("scan_backward")
    nodes = [g.input(name, value.shape) for name, value in arrays.items()]
    out = g.apply(ops.SelectiveScanBackward(arrays["A"].shape[1]), nodes, "dscan")
    g.output(out)
    return g, out


def run_gpu(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The five gradients from the GPU (no host step), after checking the flat output vs the reference."""
    g, out = scan_backward(arrays)
    exe = rlxpy.compile(g)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    got = exe.run(arrays)[out.name]
    assert_close(got, run_reference(g, arrays)[out.name], *SCAN_TOL, "GPU vs reference")
    parts, start = [], 0
    for name in NAMES:
        size = arrays[name].size
        parts.append(got[start:start + size].reshape(arrays[name].shape))
        start += size
    assert start == got.size
    return parts


CASES = [(1, 1, 1, 1), (2, 3, 5, 16), (1, 17, 33, 16), (2, 17, 1, 1), (1, 3, 33, 1), (2, 1, 5, 16),
         (2, 17, 5, 20), (1, 255, 3, 16), (1, 3, 2, 256)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_selective_scan_backward_matches_autograd(device, case):
    arrays = scan_inputs(*case)
    for name, got, want in zip(NAMES, run_gpu(arrays), torch_gradients(arrays), strict=True):
        assert_close(got, want, *SCAN_TOL, f"d{name} vs torch.autograd")


def test_selective_scan_backward_over_several_dispatches(device, monkeypatch):
    from rlxpy.wgpu_backend.lowering import reduce as reduce_lowering

    monkeypatch.setattr(reduce_lowering, "LOOP_BUDGET", 60)  # 6 steps per dispatch for N = 16: 6 pieces of 31
    arrays = scan_inputs(2, 31, 5, 16, seed=4)
    g, _ = scan_backward(arrays)
    steps = rlxpy.compile(g).schedule.steps
    assert len(steps) == 2 * 6 + 1, [s.label for s in steps]
    for name, got, want in zip(NAMES, run_gpu(arrays), torch_gradients(arrays), strict=True):
        assert_close(got, want, *SCAN_TOL, f"d{name} vs torch.autograd, chunked")


def test_selective_scan_backward_propagates_nan_and_inf(device):
    arrays = scan_inputs(1, 5, 3, 4, seed=5)
    arrays["x"][0, 2, 1] = np.nan
    arrays["dy"][0, 4, 0] = np.inf
    got = run_gpu(arrays)  # compared with the reference there, NaN for NaN
    assert np.isnan(got[0]).any() and np.isnan(got[3]).any()


def test_selective_scan_backward_in_groups_of_batches(device, monkeypatch):
    from rlxpy.wgpu_backend.lowering import backward_scan

    arrays = scan_inputs(3, 9, 5, 16, seed=6)
    per_batch = 4 * 16 * 5 * (2 * 9 + 1)
    monkeypatch.setattr(backward_scan, "SCRATCH_CAP", 2 * per_batch)  # groups of 2 batches, then 1
    g, _ = scan_backward(arrays)
    steps = rlxpy.compile(g).schedule.steps
    assert [s.kernel for s in steps].count("backward_scan_selective_sums") == 2
    for name, got, want in zip(NAMES, run_gpu(arrays), torch_gradients(arrays), strict=True):
        assert_close(got, want, *SCAN_TOL, f"d{name} vs torch.autograd, batches in groups")

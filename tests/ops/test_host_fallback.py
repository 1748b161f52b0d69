"""Ops without a WGSL kernel run as host steps between GPU passes, checked against torch."""

from __future__ import annotations

import numpy as np
from helpers import assert_close, check_op, rand

import rlxpy


def test_conv2d_runs_as_a_host_step_between_gpu_steps(device):
    import torch

    x, w = rand((2, 3, 9, 11), 1), rand((4, 3, 3, 3), 2)

    def build(g, xn, wn):
        y = g.conv(g.relu(xn), wn, stride=2, padding=1)   # GPU -> host -> GPU
        return g.add(y, y)

    out = check_op(build, [x, w], lambda a, b: 2 * torch.nn.functional.conv2d(torch.relu(a), b, None, 2, 1),
                   tol="matmul")
    assert out
    g = rlxpy.Graph()
    xn, wn = g.input("x", x.shape), g.input("w", w.shape)
    g.output(build(g, xn, wn))
    exe = rlxpy.compile(g)
    kinds = [s.kind for s in exe.schedule.steps]
    assert kinds == ["gpu", "host", "gpu"]
    assert exe.report().summary["host_kernels"] == {"host_Conv": 1}


def test_fft_host_step_matches_numpy(device):
    x = rand((3, 2 * 12), 3)

    def oracle(t):
        spec = np.fft.fft(t.numpy()[:, :12] + 1j * t.numpy()[:, 12:], axis=-1)
        return np.concatenate([spec.real, spec.imag], axis=-1).astype(np.float32)

    check_op(lambda g, a: g.fft(a), [x], oracle, tol=(1e-4, 1e-4))


def test_grouped_matmul_host_step_matches_torch(device):
    import torch

    x, w = rand((5, 6), 4), rand((3, 6, 7), 5)
    idx = np.array([2, 0, 1, 2, 0], np.int32)

    def oracle(a, b, e):
        return torch.stack([a[i] @ b[int(e[i])] for i in range(a.shape[0])])

    got = check_op(lambda g, a, b, e: g.grouped_matmul(a, b, e), [x, w, idx], oracle, tol="matmul")
    assert_close(next(iter(got.values())), oracle(*(torch.from_numpy(v) for v in (x, w, idx))).numpy(),
                 1e-4, 1e-5)

"""Ops without a WGSL kernel run as host steps between GPU passes, checked against torch."""

from __future__ import annotations

import numpy as np
from helpers import assert_close, check_op, rand

import rlxpy
from rlxpy.ir.reference import run_reference


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


def test_gated_delta_net_host_step_carries_its_state_across_runs(device):
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

"""Conv runs as a host step between GPU passes (no conv kernel yet), checked against torch."""

from __future__ import annotations

from helpers import check_op, rand

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

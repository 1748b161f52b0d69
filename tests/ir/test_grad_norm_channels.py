"""Gradient rules of the channel norms (GroupNorm, instance norm as GroupNorm with groups = C, a
training batch norm as a GroupNorm over the batch, BatchNorm with given statistics) vs torch.autograd
in float64 (F32 graph: rtol 2e-4, atol 2e-5, the statistics' sums over up to 255 values in f32) and
central differences of the float64 reference (FD_TOL)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from grad_helpers import check_grads, rand

NORM_TOL = (2e-4, 2e-5)

# (shape, groups, with beta)
GROUP_CASES = [((1, 3), 1, False), ((2, 3, 17), 3, True), ((3, 6, 5, 3), 2, True), ((2, 5, 1, 3), 5, False),
               ((1, 4, 3, 2, 3), 1, True), ((2, 3, 255), 1, True)]


@pytest.mark.parametrize("case", GROUP_CASES, ids=str)
def test_group_norm_gradients(case):
    shape, groups, with_beta = case
    arrays = {"x": rand(shape, 0, 2.0, 1.0), "gamma": rand(shape[1:2], 1)}
    if with_beta:
        arrays["beta"] = rand(shape[1:2], 2)
    check_grads(lambda g, *t: g.group_norm(t[0], groups, *t[1:], eps=1e-5),
                lambda *t: F.group_norm(t[0], groups, *t[1:], eps=1e-5), arrays, tol=NORM_TOL)


def test_training_batch_norm_as_group_norm_over_the_batch():
    """x [N, C, H, W] -> [1, C, N*H*W] (channels first): GroupNorm(C) is batch norm with batch statistics."""
    arrays = {"x": rand((3, 5, 4, 3), 3, 1.5, 0.5), "gamma": rand((5,), 4), "beta": rand((5,), 5)}

    def build(g, x, gamma, beta):
        flat = g.reshape(g.transpose(x, (1, 0, 2, 3)), (1, 5, 36))
        normed = g.group_norm(flat, 5, gamma, beta, eps=1e-5)
        return g.transpose(g.reshape(normed, (5, 3, 4, 3)), (1, 0, 2, 3))

    def reference(x, gamma, beta):
        return F.batch_norm(x, None, None, gamma, beta, training=True, eps=1e-5)

    check_grads(build, reference, arrays, tol=NORM_TOL)


@pytest.mark.parametrize("shape", [(1, 1), (2, 3, 17), (3, 5, 4, 3), (1, 2, 3, 1, 2)], ids=str)
def test_batch_norm_with_given_statistics_gradients(shape):
    channels = shape[1]
    arrays = {"x": rand(shape, 6), "mean": rand((channels,), 7),
              "var": (np.abs(rand((channels,), 8)) + 0.5).astype(np.float32),
              "gamma": rand((channels,), 9), "beta": rand((channels,), 10)}
    def reference(x, m, v, w, b):  # torch's batch_norm does not differentiate its running statistics
        per_channel = (1, channels) + (1,) * (len(shape) - 2)
        inv = torch.rsqrt(v + 1e-5)
        return (x - m.reshape(per_channel)) * (inv * w).reshape(per_channel) + b.reshape(per_channel)

    x, m, v, w, b = (torch.from_numpy(a).double() for a in arrays.values())
    assert torch.allclose(reference(x, m, v, w, b), F.batch_norm(x, m, v, w, b, training=False, eps=1e-5))
    check_grads(lambda g, *t: g.batch_norm(*t, eps=1e-5), reference, arrays, tol=NORM_TOL)

"""Gradient rules of the reduce family vs torch.autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from grad_helpers import check_grads, rand

CASES = [((1,), (0,)), ((3,), (0,)), ((17, 5), (1,)), ((17, 5), (0,)), ((255, 3, 2), (1, 2)),
         ((4, 3, 5), (0, 1))]
TORCH = {
    "sum": lambda x, axes, keep: x.sum(dim=axes, keepdim=keep),
    "mean": lambda x, axes, keep: x.mean(dim=axes, keepdim=keep),
    "max": lambda x, axes, keep: x.amax(dim=axes, keepdim=keep),
    "min": lambda x, axes, keep: x.amin(dim=axes, keepdim=keep),
    "prod": lambda x, axes, keep: _prod(x, axes, keep),
}


def _prod(x, axes, keep):
    for axis in sorted(axes, reverse=True):
        x = x.prod(dim=axis, keepdim=keep)
    return x


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("op", sorted(TORCH))
def test_reduce_gradients(op, case, keep):
    shape, axes = case
    x = rand(shape, seed=len(shape), scale=1.0)
    if op == "prod":
        x = np.sign(x) * (np.abs(x) * 0.5 + 0.7)  # moderate magnitudes: a long product stays finite
    check_grads(lambda g, a: g.reduce(a, op, axes, keep), lambda a: TORCH[op](a, axes, keep), {"x": x})


def test_max_and_min_split_ties_evenly_like_torch():
    x = np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, 0.5, 0.5], [-1.0, -4.0, 2.0, -4.0]], np.float32)
    for op in ("max", "min"):
        check_grads(lambda g, a, op=op: g.reduce(a, op, 1), lambda a, op=op: TORCH[op](a, (1,), False),
                    {"x": x}, fd=False)


def test_prod_gradient_with_zeros_in_the_slice():
    x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 5.0]], np.float32)
    check_grads(lambda g, a: g.reduce(a, "prod", 1), lambda a: a.prod(dim=1), {"x": x}, fd=False)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("shape, axis", [((1,), 0), ((17, 5), 0), ((17, 5), -1), ((3, 255, 2), 1)], ids=str)
def test_cumsum_gradient(shape, axis, exclusive):
    x = rand(shape, seed=3)

    def oracle(a):
        total = torch.cumsum(a, dim=axis)
        return total - a if exclusive else total

    check_grads(lambda g, a: g.cumsum(a, axis, exclusive), oracle, {"x": x})

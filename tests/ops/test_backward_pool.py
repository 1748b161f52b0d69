"""PoolBackward on the GPU against torch.autograd of torch's own pools (float64, on the same f32
inputs) and the numpy reference: max/avg/sum, 1-D/2-D/3-D, stride 2, dilation 2, asymmetric padding,
ceil_mode, count_include_pad both ways, divisor_override, adaptive and global bins; odd sizes
(1, 3, 17). f32 tolerance POOL_TOL (rtol 1e-5, atol 1e-6): each dx is a sum of a few dy shares."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close

import rlxpy
from rlxpy.ir import ops
from rlxpy.ir.ops.base import ReduceOp
from rlxpy.ir.reference import run_reference

POOL_TOL = (1e-5, 1e-6)


def distinct(shape, seed=0) -> np.ndarray:
    """Distinct values (an unambiguous max)."""
    values = np.random.default_rng(seed).permutation(int(np.prod(shape))).astype(np.float32)
    return (values.reshape(shape) / values.size - 0.5).astype(np.float32)


def run_gpu(x: np.ndarray, forward: ops.Op) -> tuple[np.ndarray, np.ndarray]:
    """(dx from the GPU, dy) for a random dy; no host step; checked against the reference too."""
    g = rlxpy.Graph("pool_backward")
    xn = g.input("x", x.shape)
    y = g.apply(forward, [xn], "y")
    dy_node = g.input("dy", y.shape)
    dx = g.apply(ops.PoolBackward.of(forward), [xn, y, dy_node], "dx")
    g.output(dx)
    dy = np.random.default_rng(9).standard_normal(y.shape).astype(np.float32)
    exe = rlxpy.compile(g)
    assert not [s.label for s in exe.schedule.steps if s.kind == "host"], "host steps"
    assert any(s.kernel == "backward_pool" for s in exe.schedule.steps)
    got = exe.run({"x": x, "dy": dy})["dx"]
    assert_close(got, run_reference(g, {"x": x, "dy": dy})["dx"], *POOL_TOL, "GPU vs reference")
    return got, dy


def torch_dx(fn, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(x).double().requires_grad_()
    (fn(t) * torch.from_numpy(dy).double()).sum().backward()
    return t.grad.numpy()


# (shape, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad, divisor)
CASES = [
    ((1, 1, 1), "max", 1, 1, 0, 1, False, True, None),
    ((2, 3, 17), "max", 3, 2, 1, 2, True, True, None),
    ((1, 5, 17, 3), "max", (3, 2), (2, 1), (1, 0), 1, False, True, None),
    ((2, 3, 7, 9), "max", 3, 2, 1, (2, 1), True, True, None),
    ((1, 3, 6, 6), "max", 3, 1, 1, 1, False, True, None),
    ((1, 2, 5, 4, 3), "max", 2, 2, 0, 1, True, True, None),
    ((2, 3, 17), "avg", 3, 2, 1, 1, True, True, None),
    ((2, 3, 17), "avg", 3, 2, 1, 1, True, False, None),
    ((1, 5, 17, 3), "avg", (3, 2), (2, 1), (1, 1), 1, False, False, None),
    ((2, 1, 7, 8), "avg", 3, 2, 1, 1, True, True, 5),
    ((1, 2, 5, 4, 3), "avg", 2, 2, 1, 1, True, False, None),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_pool_backward_matches_autograd(device, case):
    shape, kind, kernel, stride, padding, dilation, ceil_mode, include, divisor = case
    spatial = len(shape) - 2
    x = distinct(shape)
    window = dict(kernel_size=(kernel,) if isinstance(kernel, int) else kernel,
                  stride=(stride,) if isinstance(stride, int) else stride,
                  padding=(padding,) if isinstance(padding, int) else padding, ceil_mode=ceil_mode)
    if kind == "max":
        forward = ops.Pool(ReduceOp.MAX, dilation=(dilation,) if isinstance(dilation, int) else dilation,
                           **window)
        fn = getattr(F, f"max_pool{spatial}d")

        def reference(t):
            return fn(t, kernel, stride, padding, dilation, ceil_mode)
    else:
        forward = ops.Pool(ReduceOp.MEAN, count_include_pad=include, divisor=divisor or 0, **window)
        fn = getattr(F, f"avg_pool{spatial}d")
        extra = {"divisor_override": divisor} if spatial > 1 else {}

        def reference(t):
            return fn(t, kernel, stride, padding, ceil_mode, include, **extra)
    got, dy = run_gpu(x, forward)
    assert_close(got, torch_dx(reference, x, dy), *POOL_TOL, "dx vs torch.autograd")


def test_sum_pool_backward_asymmetric_padding(device):
    x = distinct((2, 3, 8, 7), 2)
    got, dy = run_gpu(x, ops.Pool(ReduceOp.SUM, (3,), (2,), (1,), padding_end=(0,)))
    want = torch_dx(lambda t: F.avg_pool2d(F.pad(t, (1, 0, 1, 0)), 3, 2) * 9, x, dy)
    assert_close(got, want, *POOL_TOL, "dx vs torch.autograd")


@pytest.mark.parametrize("case", [((2, 3, 17), 5, "avg"), ((1, 5, 17, 3), (4, 5), "avg"),
                                  ((2, 3, 17), 5, "max"), ((2, 1, 4, 5, 3), (3, 2, 1), "max"),
                                  ((1, 3, 3, 2), (5, 3), "max"), ((3, 5, 7, 9), 1, "avg"),
                                  ((3, 5, 7, 9), 1, "max")], ids=str)
def test_adaptive_pool_backward_matches_autograd(device, case):
    shape, size, kind = case
    x = distinct(shape, 3)
    forward = ops.AdaptivePool(ReduceOp.MEAN if kind == "avg" else ReduceOp.MAX,
                               (size,) if isinstance(size, int) else size)
    fn = getattr(F, f"adaptive_{kind}_pool{len(shape) - 2}d")
    got, dy = run_gpu(x, forward)
    assert_close(got, torch_dx(lambda t: fn(t, size), x, dy), *POOL_TOL, "dx vs torch.autograd")


def test_max_pool_backward_nan_wins_and_tie_goes_to_the_first_tap(device):
    x = np.zeros((1, 1, 6), np.float32)
    x[0, 0, 4] = np.nan
    got, dy = run_gpu(x, ops.Pool(ReduceOp.MAX, (2,), (1,)))
    # windows [0,1] [1,2] [2,3]: a tie of zeros, the first tap wins; [3,4] [4,5]: the NaN wins
    want = np.array([dy[0, 0, 0], dy[0, 0, 1], dy[0, 0, 2], 0.0, dy[0, 0, 3] + dy[0, 0, 4], 0.0], np.float32)
    assert_close(got[0, 0], want, *POOL_TOL, "ties and NaN")

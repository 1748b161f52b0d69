"""The numpy reference of the reduce family against torch: reductions, scans and selection, on
odd shapes and NaN/inf edge values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference_helpers import close_tight as close
from reference_helpers import rand_edges as rand
from reference_helpers import run, t

from rlxpy.ir.ops import ReduceOp

ODD_SHAPES = [(1,), (3,), (17, 5), (255, 33), (2, 3, 257)]


# -- reductions ------------------------------------------------------------------------------------------
def _torch_reduce(x: torch.Tensor, op: ReduceOp, axes: tuple[int, ...], keep_dim: bool) -> torch.Tensor:
    axes = tuple(sorted(a % x.ndim for a in axes))
    if op is ReduceOp.PROD:  # torch.prod takes one dim: merge the contiguous axes first
        merged = x.reshape(x.shape[:axes[0]] + (-1,) + x.shape[axes[-1] + 1:])
        out = merged.prod(axes[0], keepdim=keep_dim)
        if keep_dim:
            out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return out
    fn = {ReduceOp.SUM: torch.sum, ReduceOp.MEAN: torch.mean, ReduceOp.MAX: torch.amax,
          ReduceOp.MIN: torch.amin}
    return fn[op](x, dim=axes, keepdim=keep_dim)


@pytest.mark.parametrize("keep_dim", [False, True])
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (-1,), (0, 1), (1, 2), (-2, -1), (0, 1, 2)], ids=str)
@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda k: k.name)
def test_reduce_matches_torch(op, axes, keep_dim):
    x = rand((3, 17, 5), seed=26, scale=1.0, edges=False)
    if op is ReduceOp.PROD:
        x = np.float32(1.0) + x * np.float32(0.05)  # keep the product in range
    out = run(lambda g, a: g.reduce(a, op, axes, keep_dim), x=x)
    close(out, _torch_reduce(t(x).double(), op, axes, keep_dim).float(), rtol=2e-6)


@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda k: k.name)
def test_reduce_propagates_nan_like_torch(op):
    x = rand((17, 5), seed=27, edges=False)
    x[3, 2] = np.nan
    x[5, 0] = np.inf
    out = run(lambda g, a: g.reduce(a, op, -1), x=x)
    close(out, _torch_reduce(t(x).double(), op, (-1,), False).float(), rtol=2e-6)
    assert np.isnan(out[3]) and not np.isnan(out[0])


def test_reduce_over_255_elements_and_integer_sum():
    x = rand((255,), seed=28, edges=False)
    close(run(lambda g, a: g.sum(a, 0), x=x), t(x).double().sum().float(), rtol=2e-6)
    ints = np.arange(-8, 9, dtype=np.int32).reshape(17, 1)
    np.testing.assert_array_equal(run(lambda g, a: g.sum(a, (0, 1), keep_dim=True), x=ints), [[0]])


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (255, 33)], ids=str)
def test_cumsum_inclusive_matches_torch(shape, axis):
    x = rand(shape, seed=30, edges=False)
    close(run(lambda g, a: g.cumsum(a, axis), x=x), torch.cumsum(t(x).double(), axis).float(), atol=1e-5)


def _torch_exclusive_cumsum(x: torch.Tensor, axis: int) -> torch.Tensor:
    """y[0] = 0, y[i] = sum_{j<i} x[j]: pad one zero in front, drop the last element."""
    zeros = torch.zeros_like(x.narrow(axis, 0, 1))
    return torch.cumsum(torch.cat([zeros, x.narrow(axis, 0, x.shape[axis] - 1)], axis), axis)


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (255, 33)], ids=str)
def test_cumsum_exclusive_matches_shifted_torch_cumsum(shape, axis):
    x = rand(shape, seed=31, edges=False)
    out = run(lambda g, a: g.cumsum(a, axis, exclusive=True), x=x)
    close(out, _torch_exclusive_cumsum(t(x).double(), axis).float(), atol=1e-5)


def test_cumsum_exclusive_is_not_poisoned_by_inf_or_nan_at_its_own_position():
    x = np.array([[1.0, np.inf, 2.0], [np.nan, 1.0, 2.0], [1e30, 1.0, -1e30]], dtype=np.float32)
    out = run(lambda g, a: g.cumsum(a, exclusive=True), x=x)
    close(out, _torch_exclusive_cumsum(t(x).double(), -1).float())
    assert out[0, 1] == 1 and out[1, 0] == 0 and out[2, 1] == np.float32(1e30)


def test_cumsum_on_integers():
    x = np.arange(-8, 9, dtype=np.int32).reshape(1, 17)
    np.testing.assert_array_equal(run(lambda g, a: g.cumsum(a), x=x), torch.cumsum(t(x), -1).numpy())


# -- topk, argmax --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,k", [((1,), 1), ((3, 17), 5), ((255, 33), 33), ((2, 3, 257), 3)], ids=str)
def test_topk_breaks_ties_toward_the_smaller_index(shape, k):
    # few distinct values, so ties are everywhere; the oracle is a stable descending argsort
    x = np.random.default_rng(32).integers(-3, 3, shape).astype(np.float32)
    out = run(lambda g, a: g.topk(a, k), x=x)
    assert out.dtype == np.int32
    expected = torch.argsort(-t(x), dim=-1, stable=True)[..., :k]
    np.testing.assert_array_equal(out, expected.numpy())
    # and the picked values are torch.topk's values
    np.testing.assert_array_equal(np.take_along_axis(x, out, -1), torch.topk(t(x), k).values.numpy())


def test_topk_ranks_nan_above_inf_like_torch():
    x = np.array([[1.0, np.inf, np.nan, -np.inf, np.nan, 2.0],
                  [np.inf, 0.0, np.nan, 3.0, -1.0, np.inf]], dtype=np.float32)
    out = run(lambda g, a: g.topk(a, 6), x=x)
    assert out.tolist() == [[2, 4, 1, 5, 0, 3], [2, 0, 5, 3, 1, 4]]
    values = np.take_along_axis(x, out, -1)
    torch.testing.assert_close(t(values), torch.topk(t(x), 6).values, equal_nan=True)


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=str)
def test_argmax_matches_torch(shape):
    x = np.random.default_rng(33).integers(-5, 5, shape).astype(np.float32)  # ties -> first index
    out = run(lambda g, a: g.argmax(a), x=x)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, torch.argmax(t(x), -1).numpy())


def test_argmax_picks_the_first_nan_like_torch():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [np.inf, 1.0, np.nan, np.inf], [2.0, 5.0, 5.0, -np.inf],
                  [-np.inf, -np.inf, -np.inf, -np.inf]], dtype=np.float32)
    out = run(lambda g, a: g.argmax(a), x=x)
    assert out.tolist() == [1, 2, 1, 0]
    np.testing.assert_array_equal(out, torch.argmax(t(x), -1).numpy())

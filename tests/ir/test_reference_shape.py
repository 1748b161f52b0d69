"""The numpy reference of the shape family against torch: views and data movement, on odd
shapes and NaN/inf edge values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference_helpers import close_tight as close
from reference_helpers import rand_edges as rand
from reference_helpers import run, t


# -- views and data movement -------------------------------------------------------------------------
@pytest.mark.parametrize("shape,new_shape", [((255, 33), (-1, 11)), ((2, 3, 257), (6, -1)), ((1,), (-1,)),
                                             ((17, 5), (5, 1, -1)), ((3,), (1, 3, 1))])
def test_reshape_matches_torch(shape, new_shape):
    x = rand(shape, seed=14)
    out = run(lambda g, a: g.reshape(a, new_shape), x=x)
    np.testing.assert_array_equal(out, t(x).reshape(new_shape).numpy())


@pytest.mark.parametrize("shape,perm", [((17, 5), (1, 0)), ((2, 3, 257), (2, 0, 1)),
                                        ((1, 3, 17, 5), (0, 2, 1, 3)), ((3,), (0,))])
def test_transpose_matches_torch_permute(shape, perm):
    x = rand(shape, seed=15)
    np.testing.assert_array_equal(run(lambda g, a: g.transpose(a, perm), x=x), t(x).permute(perm).numpy())


@pytest.mark.parametrize("shape,axis,start,length", [((255, 33), 0, 17, 100), ((255, 33), 1, 32, 1),
                                                     ((2, 3, 257), -1, 0, 255), ((3,), 0, 1, 2),
                                                     ((17, 5), 1, 5, 0)])
def test_narrow_matches_torch(shape, axis, start, length):
    x = rand(shape, seed=16)
    out = run(lambda g, a: g.narrow(a, axis, start, length), x=x)
    np.testing.assert_array_equal(out, t(x).narrow(axis, start, length).numpy())


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_matches_torch_cat(axis):
    shapes = {0: [(1, 3, 5), (17, 3, 5), (3, 3, 5)], 1: [(2, 1, 5), (2, 17, 5)], -1: [(2, 3, 1), (2, 3, 255)]}
    arrays = {f"x{i}": rand(s, seed=17 + i) for i, s in enumerate(shapes[axis])}
    out = run(lambda g, *xs: g.concat(xs, axis), **arrays)
    np.testing.assert_array_equal(out, torch.cat([t(a) for a in arrays.values()], axis).numpy())


@pytest.mark.parametrize("shape,target", [((1,), (255,)), ((17, 1), (3, 17, 5)), ((5,), (2, 3, 5)),
                                          ((3, 1), (3, 17))])
def test_expand_matches_torch(shape, target):
    x = rand(shape, seed=20)
    out = run(lambda g, a: g.expand(a, target), x=x)
    np.testing.assert_array_equal(out, t(x).expand(target).numpy())


def _torch_gather(table: torch.Tensor, idx: np.ndarray, axis: int) -> torch.Tensor:
    """Clamp into [0, dim-1] (truncating fractions), index_select, reshape like numpy.take."""
    dim = table.shape[axis]
    clamped = torch.from_numpy(np.trunc(idx.astype(np.float64))).long().clamp(0, dim - 1)
    picked = torch.index_select(table, axis, clamped.reshape(-1))
    return picked.reshape(table.shape[:axis] + tuple(idx.shape) + table.shape[axis + 1:])


@pytest.mark.parametrize("axis,table_shape,idx_shape", [(0, (255, 33), (17,)), (0, (3, 5), (2, 4)),
                                                        (1, (3, 17, 5), (6,)), (2, (2, 3, 257), (3, 1)),
                                                        (-1, (17, 5), (1,))])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64, np.float32])
def test_gather_matches_torch_index_select_with_clamping(axis, table_shape, idx_shape, idx_dtype):
    table = rand(table_shape, seed=22)
    dim = table_shape[axis]
    rng = np.random.default_rng(23)
    idx = rng.integers(-3, dim + 3, idx_shape).astype(idx_dtype)  # out-of-range both sides: clamped
    if idx_dtype is np.float32:
        idx = idx + np.float32(0.75) * np.sign(idx)  # fractions truncate toward zero
    out = run(lambda g, a, i: g.gather(a, i, axis), table=table, idx=idx)
    np.testing.assert_array_equal(out, _torch_gather(t(table), idx, axis % len(table_shape)).numpy())


@pytest.mark.parametrize("updates_shape,out_dim", [((17, 5), 3), ((255,), 17), ((1, 3, 2), 1), ((33, 4), 40)])
def test_scatter_add_matches_torch_index_add(updates_shape, out_dim):
    updates = rand(updates_shape, seed=24, edges=False)
    rng = np.random.default_rng(25)
    idx = rng.integers(-2, out_dim + 2, updates_shape[0]).astype(np.int32)  # rows outside are skipped
    out = run(lambda g, u, i: g.scatter_add(u, i, out_dim), updates=updates, idx=idx)
    keep = (idx >= 0) & (idx < out_dim)
    expected = torch.zeros((out_dim,) + updates_shape[1:], dtype=torch.float64)
    expected.index_add_(0, t(idx[keep]).long(), t(updates[keep]).double())
    close(out, expected.float())


# -- resize (torch.nn.functional.interpolate) -------------------------------------------------------
def _interpolate_case(mode: str, align: bool | None):
    """(ResizeMode, ResizeCoord) of torch's interpolate mode."""
    if mode == "nearest":
        return "nearest_floor", "asymmetric"
    if mode == "nearest-exact":
        return "nearest_round_prefer_ceil", "half_pixel"
    return "linear", "align_corners" if align else "half_pixel"


@pytest.mark.parametrize("shape,size,scale", [((2, 3, 5, 7), (9, 4), None), ((1, 2, 4, 6), None, 2.0),
                                              ((1, 1, 5, 3), None, 1.5), ((2, 2, 7), (3,), None),
                                              ((1, 2, 3, 4, 5), (5, 3, 8), None),
                                              ((1, 1, 6, 6), (1, 1), None)],
                         ids=str)
@pytest.mark.parametrize("mode,align", [("nearest", None), ("nearest-exact", None), ("linear", False),
                                        ("linear", True)])
def test_resize_matches_torch_interpolate(shape, size, scale, mode, align):
    import torch.nn.functional as F

    x = rand(shape, seed=26)  # NaN and +-inf among the first elements
    spatial = len(shape) - 2
    torch_mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[spatial] if mode == "linear" else mode
    expected = F.interpolate(t(x), size=size, scale_factor=scale, mode=torch_mode, align_corners=align)
    sizes = tuple(expected.shape[2:])
    steps = (1 / scale,) * spatial if scale is not None else ()
    resize_mode, coord = _interpolate_case(mode, align)
    out = run(lambda g, a: g.resize(a, sizes, resize_mode, coord, steps), x=x)
    close(out, expected, atol=1e-5)  # torch interpolates in f32: cancellation leaves ~1e-6

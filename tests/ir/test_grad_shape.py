"""Gradient rules of the shape family vs torch.autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from grad_helpers import check_grads, rand


def test_reshape_and_transpose_gradients():
    x = rand((3, 17, 5), seed=1)
    check_grads(lambda g, a: g.transpose(g.reshape(a, (17, 3, 5)), (2, 0, 1)),
                lambda a: a.reshape(17, 3, 5).permute(2, 0, 1), {"x": x})


@pytest.mark.parametrize("axis, start, length", [(0, 0, 1), (1, 3, 10), (1, 0, 17), (-1, 4, 1)])
def test_narrow_gradient_pads_with_zeros(axis, start, length):
    x = rand((5, 17, 5), seed=2)
    check_grads(lambda g, a: g.narrow(a, axis, start, length), lambda a: a.narrow(axis, start, length),
                {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_gradient_splits_dy(axis):
    a, b, c = rand((3, 4, 5), 3), rand((3, 4, 5), 4), rand((3, 4, 5), 5)
    check_grads(lambda g, *t: g.concat(t, axis), lambda *t: torch.cat(t, dim=axis), {"a": a, "b": b, "c": c})


@pytest.mark.parametrize("shape, target", [((1,), (255,)), ((3, 1), (2, 3, 17)), ((1, 5), (4, 5)),
                                           ((2, 1, 3), (2, 4, 3))], ids=str)
def test_expand_gradient_sums_broadcast_axes(shape, target):
    x = rand(shape, seed=6)
    check_grads(lambda g, a: g.expand(a, target), lambda a: a.expand(*target), {"x": x})


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_gradient_scatter_adds_repeated_rows(axis):
    table = rand((7, 6), seed=7)
    idx = np.array([[0, 3, 3], [5, 0, 2]], np.int32)
    check_grads(lambda g, t, i: g.gather(t, i, axis),
                lambda t, i: torch.index_select(t, axis, i.reshape(-1)).reshape(
                    t.shape[:axis] + i.shape + t.shape[axis + 1:]), {"table": table, "idx": idx})


def test_embedding_gradient_with_out_of_range_indices_clamped_like_the_forward():
    table = rand((5, 3), seed=8)
    idx = np.array([-2, 0, 9, 4, 4], np.int32)  # clamped to 0, 0, 4, 4, 4 by Gather
    clamped = np.clip(idx, 0, 4)
    check_grads(lambda g, t, i: g.gather(t, i), lambda t, i: t[torch.from_numpy(clamped).long()],
                {"table": table, "idx": idx})


def test_scatter_add_gradient_gathers_and_skips_rows_outside():
    updates = rand((6, 4), seed=9)
    idx = np.array([0, 2, 2, 7, -1, 1], np.int32)

    def oracle(u, i):
        keep = (i >= 0) & (i < 3)
        out = torch.zeros(3, 4, dtype=u.dtype)
        return out.index_add(0, i[keep], u[keep])

    check_grads(lambda g, u, i: g.scatter_add(u, i, 3), oracle, {"updates": updates, "idx": idx})

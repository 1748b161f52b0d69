"""Gradient rules of the loss family vs torch.autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as F
from grad_helpers import check_grads, rand


@pytest.mark.parametrize("shape, axis", [((1,), 0), ((3,), 0), ((17, 5), -1), ((17, 5), 0),
                                         ((2, 3, 255), -1)], ids=str)
def test_log_softmax_gradient(shape, axis):
    x = rand(shape, 1, scale=3.0)
    check_grads(lambda g, a: g.log_softmax(a, axis), lambda a: F.log_softmax(a, dim=axis), {"x": x})


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("rows, classes", [(1, 1), (3, 5), (17, 255), (255, 3)])
def test_cross_entropy_gradient(rows, classes, reduction):
    logits = rand((rows, classes), 2, scale=2.0)
    targets = np.random.default_rng(3).integers(0, classes, rows).astype(np.int32)
    check_grads(lambda g, x, t: g.cross_entropy(x, t, reduction),
                lambda x, t: F.cross_entropy(x, t, reduction=reduction),
                {"logits": logits, "targets": targets})


def test_cross_entropy_ignores_out_of_range_targets_like_ignore_index():
    logits = rand((2, 3, 7), 4, scale=3.0)
    targets = np.array([[1, -100, 6], [-100, 0, 3]], np.int32)
    check_grads(lambda g, x, t: g.cross_entropy(x, t),
                lambda x, t: F.cross_entropy(x.reshape(6, 7), t.reshape(6), ignore_index=-100),
                {"logits": logits, "targets": targets})


def test_cross_entropy_gradient_of_huge_logits_is_finite():
    logits = rand((4, 11), 5, scale=50.0, shift=1e4)
    targets = np.array([0, 10, 3, 3], np.int32)
    check_grads(lambda g, x, t: g.cross_entropy(x, t), lambda x, t: F.cross_entropy(x, t),
                {"logits": logits, "targets": targets}, fd=False)

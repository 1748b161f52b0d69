"""Reference semantics of the loss family (LogSoftmax, CrossEntropy, TargetCount) vs torch, with
edge values: NaN / inf rows, huge logits, out-of-range targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reference_helpers import close_tight, rand_plain, run, t

from rlxpy.errors import GraphError
from rlxpy.ir import Graph, ops


@pytest.mark.parametrize("shape, axis", [((1,), 0), ((3,), 0), ((17, 5), -1), ((17, 5), 0), ((2, 255, 3), 1)],
                         ids=str)
def test_log_softmax_matches_torch(shape, axis):
    x = rand_plain(shape, 1, scale=4.0)
    close_tight(run(lambda g, a: g.log_softmax(a, axis), x=x), F.log_softmax(t(x), dim=axis))


def test_log_softmax_special_rows():
    x = np.array([[1.0, -np.inf, 2.0], [np.nan, 0.0, 1.0], [np.inf, 0.0, 1.0], [-np.inf] * 3,
                  [1e4, 1e4 + 1, 0]], np.float32)
    got = run(lambda g, a: g.log_softmax(a), x=x)
    want = F.log_softmax(t(x), dim=-1).numpy()
    close_tight(got[[0, 4]], want[[0, 4]])  # finite rows, -inf kept where the logit is -inf
    assert np.isnan(got[1:4]).all()  # NaN or +inf in a row, or only -inf: NaN (torch: NaN or -inf)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_cross_entropy_per_row_and_mean_ignore_targets_out_of_range(dtype):
    logits = rand_plain((6, 7), 2, scale=3.0)
    targets = np.array([1, 6, 0, 9, 3, 2]) if dtype == np.uint32 else np.array([1, -100, 6, 0, 7, -1])
    targets = targets.astype(dtype)
    per_row = run(lambda g, x, y: g.cross_entropy(x, y, "none"), x=logits, y=targets)
    keep = (targets.astype(np.int64) >= 0) & (targets.astype(np.int64) < 7)
    want = np.zeros(6)
    want[keep] = F.cross_entropy(t(logits)[keep], t(targets.astype(np.int64))[keep], reduction="none").numpy()
    close_tight(per_row, want)
    mean = run(lambda g, x, y: g.cross_entropy(x, y), x=logits, y=targets)
    close_tight(mean, np.float32(want.sum() / keep.sum()))
    count = run(lambda g, y: g.apply(ops.TargetCount(7), [y]), y=targets)
    assert count == keep.sum()


def test_cross_entropy_of_huge_logits_and_no_valid_target():
    logits = rand_plain((3, 4), 3, scale=50.0) + 1e4
    targets = np.array([0, 3, 1], np.int32)
    close_tight(run(lambda g, x, y: g.cross_entropy(x, y, "sum"), x=logits, y=targets),
                F.cross_entropy(t(logits).double(), t(targets).long(), reduction="sum").float(), rtol=1e-5)
    nothing = run(lambda g, x, y: g.cross_entropy(x, y), x=logits, y=np.array([-1, 4, 9], np.int32))
    assert np.isnan(nothing)  # 0 / 0, like torch's mean over no target


def test_cross_entropy_shape_errors_name_the_node():
    g = Graph()
    x, y = g.input("x", (3, 4)), g.input("y", (4,), "i32")
    with pytest.raises(GraphError, match=r"ce \(CrossEntropy\).*leading shape"):
        g.cross_entropy(x, y, "none", name="ce")
    with pytest.raises(GraphError, match="reduction"):
        g.cross_entropy(x, g.input("z", (3,), "i32"), "avg")
    with pytest.raises(GraphError, match="class indices"):
        g.cross_entropy(x, g.input("w", (3,)), "none")


def test_cross_entropy_backward_zeroes_ignored_rows():
    logits = rand_plain((4, 5), 4)
    targets = np.array([2, -100, 4, 7], np.int32)
    dy = rand_plain((4,), 5)
    got = run(lambda g, x, y, d: g.cross_entropy_backward(x, y, d), x=logits, y=targets, d=dy)
    tx = t(logits).double().requires_grad_()
    kept = t(np.where(targets > 4, -100, targets)).long()
    (F.cross_entropy(tx, kept, reduction="none") * t(dy)).sum().backward()
    close_tight(got, tx.grad.float())
    assert (got[1] == 0).all() and (got[3] == 0).all()


ACT = {"relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh, "abs": torch.abs}


@pytest.mark.parametrize("fn", sorted(ACT))
def test_activation_backward_edges(fn):
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 0.5, -2.5], np.float32)
    dy = rand_plain(x.shape, 6)
    got = run(lambda g, a, d: g.activation_backward(a, d, fn), x=x, d=dy)
    tx = t(x).double().requires_grad_()
    ACT[fn](tx).backward(t(dy).double())
    close_tight(got, tx.grad.float(), rtol=1e-6, atol=1e-7)
    with pytest.raises(GraphError, match="needs the activation's input"):
        run(lambda g, a, d: g.activation_backward(a, d, "gelu", of_output=True), x=x, d=dy)

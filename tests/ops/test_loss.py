"""GPU LogSoftmax / CrossEntropy (loss_rows) against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close, rand

import rlxpy
from rlxpy.ir.reference import run_reference

TOL = (1e-5, 1e-5)


@pytest.mark.parametrize("shape, axis", [((1,), 0), ((3,), 0), ((17, 5), -1), ((17, 5), 0), ((2, 255, 3), 1),
                                         ((3, 1000), -1)], ids=str)
def test_log_softmax_matches_torch(device, shape, axis):
    g = rlxpy.Graph("log_softmax")
    y = g.log_softmax(g.input("x", shape), axis)
    g.output(y)
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ["loss_rows"]
    for x in (rand(shape, seed=1, low=-8, high=8), rand(shape, seed=2, low=60, high=100)):
        got = exe.run({"x": x})[y.name]
        assert_close(got, F.log_softmax(torch.from_numpy(x), dim=axis).numpy(), *TOL, "log_softmax")


def test_log_softmax_special_rows_follow_the_reference(device):
    x = rand((4, 6), seed=3)
    x[0, 2], x[1, 1], x[2, :], x[3, 0] = np.nan, np.inf, -np.inf, -np.inf
    g = rlxpy.Graph("log_softmax_special")
    y = g.log_softmax(g.input("x", x.shape))
    g.output(y)
    got = rlxpy.compile(g).run({"x": x})[y.name]
    assert_close(got, run_reference(g, {"x": x})[y.name], *TOL, "NaN / inf rows")


@pytest.mark.parametrize("target_dtype", ["i32", "i64", "u32"])
@pytest.mark.parametrize("rows, classes", [(1, 1), (3, 5), (17, 255), (255, 3), (7, 5000)])
def test_cross_entropy_matches_torch(device, rows, classes, target_dtype):
    logits = rand((rows, classes), seed=rows, low=-6, high=6)
    targets = np.random.default_rng(classes).integers(0, classes, rows)
    if target_dtype != "u32" and rows > 2:
        targets[1] = -100  # ignored
    g = rlxpy.Graph("cross_entropy")
    x, t = g.input("x", logits.shape), g.input("t", (rows,), target_dtype)
    per_row, mean = g.cross_entropy(x, t, "none"), g.cross_entropy(x, t, "mean")
    g.output(per_row, mean)
    exe = rlxpy.compile(g)
    assert not [s for s in exe.schedule.steps if s.kind == "host"]
    numpy_dtype = {"i32": np.int32, "i64": np.int64, "u32": np.uint32}[target_dtype]
    feeds = {"x": logits, "t": targets.astype(numpy_dtype)}
    got = exe.run(feeds)
    tx, tt = torch.from_numpy(logits), torch.from_numpy(targets).long()
    assert_close(got[per_row.name], F.cross_entropy(tx, tt, reduction="none").numpy(), *TOL, "per row")
    assert_close(got[mean.name], F.cross_entropy(tx, tt).numpy(), *TOL, "mean")


def test_cross_entropy_of_huge_logits_is_finite(device):
    logits = rand((5, 9), seed=4, low=1e4, high=1.0001e4)
    targets = np.array([0, 8, 3, 3, 1], np.int32)
    g = rlxpy.Graph("cross_entropy_huge")
    y = g.cross_entropy(g.input("x", logits.shape), g.input("t", (5,), "i32"), "none")
    g.output(y)
    got = rlxpy.compile(g).run({"x": logits, "t": targets})[y.name]
    want = F.cross_entropy(torch.from_numpy(logits).double(), torch.from_numpy(targets).long(),
                           reduction="none")
    assert_close(got, want.numpy(), 1e-4, 1e-3, "huge logits")

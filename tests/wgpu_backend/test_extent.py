"""Active extent: a graph compiled for `upper` rows runs its first `actual` rows, no recompile."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, rand

import rlxpy
from rlxpy.errors import InputError
from rlxpy.ir.reference import run_reference


@pytest.fixture(scope="module")
def rows_graph(device):
    g = rlxpy.Graph("rows")
    x = g.input("x", [64, 8])
    h = g.linear(x, g.param("w", [8, 700]), g.param("b", [700]), "gelu", name="h")
    y = g.mul(h, g.param("s", [64, 700]), name="y")
    g.output(y)
    params = {"w": rand((8, 700), 1), "b": rand((700,), 2), "s": rand((64, 700), 3)}
    exe = rlxpy.compile(g)
    for k, v in params.items():
        exe.set_param(k, v)
    return g, params, exe


@pytest.mark.parametrize("actual", [1, 5, 64])
def test_first_rows_match_the_full_run(rows_graph, actual):
    g, params, exe = rows_graph
    x = rand((64, 8), 4)
    want = run_reference(g, {"x": x}, params)["y"]
    scaled = exe.set_active_extent((actual, 64))
    assert scaled == len(exe.schedule.steps)  # every step here is row-wise
    try:
        got = exe.run({"x": x})["y"]
    finally:
        exe.set_active_extent(None)
    assert_close(got[:actual], want[:actual], 1e-4, 1e-5, f"first {actual} rows")


def test_work_shrinks_with_the_extent(rows_graph):
    _, _, exe = rows_graph
    full = [exe.encoder.grids[i] for i in range(len(exe.schedule.steps))]
    exe.set_active_extent((2, 64))
    small = [exe.encoder.grids[i] for i in range(len(exe.schedule.steps))]
    exe.set_active_extent(None)
    assert all(np.prod(s) <= np.prod(f) for s, f in zip(small, full))
    assert sum(np.prod(s) for s in small) < sum(np.prod(f) for f in full) / 4
    assert [exe.encoder.grids[i] for i in range(len(full))] == full


def test_bad_extent_is_refused_and_changes_nothing(rows_graph):
    _, _, exe = rows_graph
    before = list(exe.encoder.grids)
    with pytest.raises(InputError, match="1 <= actual <= upper"):
        exe.set_active_extent((65, 64))
    assert exe.encoder.grids == before


def test_steps_of_other_leading_dims_run_in_full(device):
    g = rlxpy.Graph()
    x = g.input("x", [16, 4])
    t = g.add(g.transpose(x, [1, 0]), 1.0, name="t")  # leading dim 4: not the extent
    g.output(t)
    exe = rlxpy.compile(g)
    assert exe.set_active_extent((3, 16)) == 0


def test_extents_seen_before_are_restored_exactly(rows_graph):
    """Each extent's uniforms and grids are computed once and restored on the way back (the batched
    decoder toggles between its live rows and full prefills): every revisit gives the same rows."""
    g, params, exe = rows_graph
    x = rand((64, 8), 6)
    want = run_reference(g, {"x": x}, params)["y"]
    try:
        for extent in [(5, 64), None, (3, 64), (5, 64), None, (3, 64)]:
            exe.set_active_extent(extent)
            rows = 64 if extent is None else extent[0]
            got = exe.run({"x": x})["y"]
            assert_close(got[:rows], want[:rows], 1e-4, 1e-5, f"first {rows} rows after {extent}")
            assert exe.active_extent == extent
    finally:
        exe.set_active_extent(None)

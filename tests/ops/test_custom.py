"""umap.knn on the GPU (custom_knn) against scipy's cKDTree on random points and the numpy reference on
edge values (NaN / inf distances, ties, rows with fewer than k qualifying columns)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist

import rlxpy
from rlxpy.ir.reference import run_reference


def run_knn(pairwise: np.ndarray, k: int):
    g = rlxpy.Graph("knn")
    g.output(g.umap_knn(g.input("d", pairwise.shape), k, name="knn"))
    exe = rlxpy.compile(g)
    kinds = [(s.kind, s.kernel) for s in exe.schedule.steps]
    return exe.run({"d": pairwise})["knn"], run_reference(g, {"d": pairwise})["knn"], kinds


@pytest.mark.parametrize("n, dim, k", [(2, 3, 1), (17, 4, 5), (255, 8, 15), (1500, 16, 30)])
def test_knn_matches_ckdtree(device, n, dim, k):
    points = np.random.default_rng(n).standard_normal((n, dim))
    pairwise = cdist(points, points).astype(np.float32)
    got, ref, kinds = run_knn(pairwise, k)
    assert kinds == [("gpu", "custom_knn")]
    dist, idx = cKDTree(points).query(points, k + 1)  # the point itself comes first
    assert (idx[:, 0] == np.arange(n)).all()
    np.testing.assert_array_equal(got[:, :k], idx[:, 1:])
    assert_close(got[:, k:], dist[:, 1:], 1e-5, 1e-6, "distances vs cKDTree")
    np.testing.assert_array_equal(got, ref)


def test_knn_edge_values_match_the_reference(device):
    """NaN and +-inf never qualify; equal distances keep the lower column; a row with fewer than k
    qualifying columns is padded with column n and +inf."""
    n, k = 9, 4
    pairwise = np.random.default_rng(1).uniform(0, 5, (n, n)).astype(np.float32)
    pairwise[0, 1:] = [np.nan, np.inf, 2.0, np.nan, np.inf, np.inf, np.nan, 2.0]  # 2 qualify
    pairwise[1] = 3.0  # every column ties: columns 0, 2, 3, 4
    pairwise[2, :] = -np.inf
    pairwise[2, 7] = 1.0
    pairwise[3] = np.nan  # nothing qualifies
    got, ref, kinds = run_knn(pairwise, k)
    assert kinds == [("gpu", "custom_knn")]
    np.testing.assert_array_equal(got, ref)
    assert got[0].tolist() == [3, 8, n, n, 2, 2, np.inf, np.inf]
    assert got[1, :k].tolist() == [0, 2, 3, 4]
    assert got[2].tolist() == [7, n, n, n, 1.0, np.inf, np.inf, np.inf]
    assert got[3].tolist() == [n] * k + [np.inf] * k


def test_large_k_runs_on_the_host(device):
    pairwise = np.random.default_rng(2).uniform(0, 1, (80, 80)).astype(np.float32)
    got, ref, kinds = run_knn(pairwise, 70)
    assert [kind for kind, _ in kinds] == ["host"]
    np.testing.assert_array_equal(got, ref)

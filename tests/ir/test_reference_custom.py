"""Custom ops (llada2.group_limited_gate, umap.knn) vs torch, and the splat ops' shape rules."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.ir.graph import Graph
from rlxpy.ir.ops.custom import Custom, GateParams
from rlxpy.ir.reference import run_reference


def _rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _run(g: Graph, node, **values):
    g.output(node)
    return run_reference(g, values)[node.name]


def _torch_gate(sig, route, n_group, topk_group, top_k, scaling):
    """transformers' DeepSeek-V3 MoE gate routing (group top-2 sums, masked top-k, renormalise)."""
    sig, route = torch.from_numpy(sig).double(), torch.from_numpy(route).double()
    rows, experts = route.shape
    group_scores = route.view(rows, n_group, -1).topk(min(2, experts // n_group), dim=-1)[0].sum(-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=True)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(rows, n_group, experts // n_group).reshape(rows, -1)
    masked = route.masked_fill(~score_mask.bool(), float("-inf"))
    idx = torch.topk(masked, k=top_k, dim=-1, sorted=True)[1]
    weights = sig.gather(1, idx)
    if top_k > 1:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return idx.numpy(), (weights * scaling).numpy()


@pytest.mark.parametrize("rows, experts, n_group, topk_group, top_k", [
    (1, 4, 2, 1, 1), (3, 16, 4, 2, 4), (17, 64, 8, 4, 8), (5, 9, 9, 3, 2), (2, 8, 1, 1, 8),
])
def test_group_limited_gate_matches_torch(rows, experts, n_group, topk_group, top_k):
    logits = _rand((rows, experts), experts)
    sig = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    route = (sig + _rand((experts,), 1, 0.1)).astype(np.float32)  # sigmoid + correction bias
    g = Graph()
    y = g.group_limited_gate(g.input("sig", sig.shape), g.input("route", route.shape), n_group, topk_group,
                             top_k, routed_scaling=2.5)
    got = _run(g, y, sig=sig, route=route)
    want_idx, want_w = _torch_gate(sig, route, n_group, topk_group, top_k, 2.5)
    np.testing.assert_array_equal(got[:, :top_k], want_idx)
    np.testing.assert_allclose(got[:, top_k:], want_w, rtol=1e-6)


def test_group_limited_gate_empty_attrs_use_the_defaults():
    sig = _rand((2, 256), 3)
    g = Graph()
    y = g.custom("llada2.group_limited_gate", [g.input("s", sig.shape), g.input("r", sig.shape)])
    assert y.shape == (2, 16)
    got = _run(g, y, s=sig, r=sig)
    want_idx, want_w = _torch_gate(sig, sig, 8, 4, 8, 2.5)
    np.testing.assert_array_equal(got[:, :8], want_idx)
    np.testing.assert_allclose(got[:, 8:], want_w, rtol=1e-6)


def test_group_limited_gate_ties_pick_the_lower_group_and_expert():
    route = np.zeros((1, 8), np.float32)  # every group and every expert ties
    sig = np.full((1, 8), 0.5, np.float32)
    g = Graph()
    y = g.group_limited_gate(g.input("s", (1, 8)), g.input("r", (1, 8)), n_group=4, topk_group=2, top_k=3,
                             routed_scaling=1.0)
    got = _run(g, y, s=sig, r=route)
    np.testing.assert_array_equal(got[0, :3], [0, 1, 2])
    np.testing.assert_allclose(got[0, 3:], [1 / 3] * 3, rtol=1e-6)


def test_group_limited_gate_errors():
    g = Graph()
    s = g.input("s", (2, 12))
    with pytest.raises(GraphError, match=r"gate \(Custom\): n_group=5 must divide E=12"):
        g.group_limited_gate(s, s, n_group=5, name="gate")
    with pytest.raises(GraphError, match=r"top_k=7 must be in 1..6"):
        g.group_limited_gate(s, s, n_group=4, topk_group=2, top_k=7)
    with pytest.raises(GraphError, match="must be 0 or 20 bytes"):
        g.custom("llada2.group_limited_gate", [s, s], b"\x01\x00\x00\x00")
    with pytest.raises(GraphError, match="E=12 differs from num_experts=256"):
        g.custom("llada2.group_limited_gate", [s, s])
    with pytest.raises(GraphError, match="takes 2 inputs"):
        g.custom("llada2.group_limited_gate", [s], GateParams(4, 2, 2, 1.0, 12).pack())


def _torch_knn(pairwise, k):
    d = torch.from_numpy(pairwise).double().clone()
    n = d.shape[0]
    d[~torch.isfinite(d)] = float("inf")
    d.fill_diagonal_(float("inf"))
    values, index = torch.sort(d, dim=-1, stable=True)
    values, index = values[:, :k], index[:, :k]
    index[torch.isinf(values)] = n
    return index.numpy(), values.numpy()


@pytest.mark.parametrize("n, k", [(2, 1), (3, 2), (17, 5), (40, 39)])
def test_umap_knn_matches_torch_sort(n, k):
    points = _rand((n, 3), n)
    pairwise = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1)).astype(np.float32)
    g = Graph()
    y = g.umap_knn(g.input("d", pairwise.shape), k)
    got = _run(g, y, d=pairwise)
    want_idx, want_dist = _torch_knn(pairwise, k)
    np.testing.assert_array_equal(got[:, :k], want_idx)
    np.testing.assert_allclose(got[:, k:], want_dist, rtol=1e-6)
    assert not (got[:, :k] == np.arange(n)[:, None]).any(), "the diagonal is excluded"


def test_umap_knn_ties_inf_and_nan():
    """Only finite distances qualify (NaN, +inf and -inf do not); equal ones keep the lower column."""
    pairwise = np.array([[0, 1, 1, np.inf], [1, 0, np.nan, 2], [5, 5, 0, 5], [-np.inf] * 4], np.float32)
    g = Graph()
    got = _run(g, g.umap_knn(g.input("d", (4, 4)), 3), d=pairwise)
    np.testing.assert_array_equal(got[:, :3], [[1, 2, 4], [0, 3, 4], [0, 1, 3], [4, 4, 4]])
    np.testing.assert_array_equal(got[:, 3:], [[1, 1, np.inf], [1, 2, np.inf], [5, 5, 5], [np.inf] * 3])
    want_idx, want_dist = _torch_knn(pairwise, 3)
    np.testing.assert_array_equal(got[:, :3], want_idx)


def test_umap_knn_errors():
    g = Graph()
    d = g.input("d", (4, 4))
    with pytest.raises(GraphError, match=r"knn \(Custom\): umap.knn needs 1 <= k < n, got k=4, n=4"):
        g.umap_knn(d, 4, name="knn")
    with pytest.raises(GraphError, match="must start with k as a u32"):
        g.custom("umap.knn", [d], b"\x01")
    with pytest.raises(GraphError, match=r"pairwise distances \[n, n\]"):
        g.umap_knn(g.input("r", (4, 5)), 1)


def test_unknown_custom_name_is_a_graph_error():
    g = Graph()
    x = g.input("x", (3, 3))
    with pytest.raises(GraphError, match=r"c \(Custom\): unknown custom op 'my.op'; only "
                                         r"llada2.group_limited_gate, umap.knn exist"):
        g.custom("my.op", [x], name="c")
    assert Custom("umap.knn", struct.pack("<I", 2)).attrs() == {"name": "umap.knn", "attr_bytes": b"\2\0\0\0"}


def _scene(g: Graph, n: int, sh_per_splat: int = 3):
    sizes = (3 * n, 3 * n, 4 * n, n, 3 * n, sh_per_splat * n, 23)
    names = ("positions", "log_scales", "rotations", "opacities", "colors", "sh", "meta")
    return [g.input(name, (size,)) for name, size in zip(names, sizes)]


def test_splat_ops_shapes_and_missing_rasteriser():
    g = Graph()
    scene = _scene(g, 5)
    rgba = g.gaussian_splat_render(scene, width=4, height=3)
    assert rgba.shape == (48,)
    grads = g.gaussian_splat_render_backward(scene, g.input("d_rgba", (48,)), 4, 3, loss_grad_clip=1.0)
    assert grads.shape == (14 * 5 + 15,)
    prep = g.gaussian_splat_prepare(scene, 4, 3, prep_size=100)
    image = g.gaussian_splat_rasterize(prep, scene[-1], 4, 3)
    assert prep.shape == (100,) and image.shape == (48,)
    g.output(rgba)
    values = {node.name: np.zeros(node.shape, np.float32) for node in g.inputs()}
    with pytest.raises(UnsupportedOpError, match="host rasteriser is not implemented yet"):
        run_reference(g, values)


def test_splat_shape_errors():
    g = Graph()
    scene = _scene(g, 5)
    with pytest.raises(GraphError, match=r"splat inputs must be positions \[3N\]"):
        g.gaussian_splat_render(scene[:2] + [g.input("bad", (7,))] + scene[3:], 4, 3)
    with pytest.raises(GraphError, match=r"d_loss_rgba must be \[48\]"):
        g.gaussian_splat_render_backward(scene, g.input("d", (47,)), 4, 3)

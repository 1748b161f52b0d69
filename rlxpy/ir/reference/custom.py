"""Reference semantics: the two named custom ops and the (not yet ported) splatting ops."""

from __future__ import annotations

import numpy as np

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir.ops.custom import (
    GROUP_LIMITED_GATE,
    Custom,
    GateParams,
    GaussianSplatPrepare,
    GaussianSplatRasterize,
    GaussianSplatRender,
    GaussianSplatRenderBackward,
    knn_k,
)
from rlxpy.ir.reference.core import reference


def _descending(values: np.ndarray) -> np.ndarray:
    """Stable descending order along the last axis: ties keep the lower index, NaN sorts first."""
    key = np.where(np.isnan(values), -np.inf, -values)
    return np.argsort(key, axis=-1, kind="stable")


def group_limited_gate(sig: np.ndarray, route: np.ndarray, p: GateParams) -> np.ndarray:
    """[rows, 2*top_k]: expert ids (as floats) then weights, as transformers' DeepSeek-V3 /
    LLaDA2 MoE gate (sorted, -inf masking of the dropped groups)."""
    rows, experts = route.shape
    group_size = experts // p.n_group
    route64 = route.astype(np.float64)
    grouped = np.sort(route64.reshape(rows, p.n_group, group_size), axis=-1)[..., ::-1]
    group_scores = grouped[..., : min(2, group_size)].sum(-1)  # sum of each group's top 2
    kept_groups = _descending(group_scores)[:, : p.topk_group]
    kept = np.zeros((rows, p.n_group), dtype=bool)
    np.put_along_axis(kept, kept_groups, True, axis=-1)
    masked = np.where(np.repeat(kept, group_size, axis=-1), route64, -np.inf)
    picked = _descending(masked)[:, : p.top_k]
    weights = np.take_along_axis(sig.astype(np.float64), picked, axis=-1)
    if p.top_k > 1:
        weights = weights / (weights.sum(-1, keepdims=True) + 1e-20)
    return np.concatenate([picked.astype(np.float64), weights * p.routed_scaling], axis=-1)


def umap_knn(pairwise: np.ndarray, k: int) -> np.ndarray:
    """[n, 2k]: the k nearest columns of each row (diagonal excluded), ascending, ties -> lower
    column; only finite distances qualify, unfilled slots hold index n and distance +inf."""
    n = pairwise.shape[0]
    key = pairwise.astype(np.float64).copy()
    key[~np.isfinite(key)] = np.inf  # NaN and +-inf never beat the empty slot's +inf
    np.fill_diagonal(key, np.inf)
    order = np.argsort(key, axis=-1, kind="stable")[:, :k]
    dist = np.take_along_axis(key, order, axis=-1)
    index = np.where(np.isinf(dist), n, order)
    return np.concatenate([index.astype(np.float64), dist], axis=-1)


@reference(Custom)
def ref_custom(op: Custom, args, node):
    if op.name == GROUP_LIMITED_GATE:
        return group_limited_gate(args[0], args[1], GateParams.unpack(op.attr_bytes)).astype(np.float32)
    return umap_knn(args[0], knn_k(op.attr_bytes)).astype(np.float32)


def _no_rasteriser(op, args, node):
    raise UnsupportedOpError(f"{where(node)}: the Gaussian-splat host rasteriser is not implemented yet")


for _splat_op in (GaussianSplatRender, GaussianSplatRenderBackward, GaussianSplatPrepare,
                  GaussianSplatRasterize):
    reference(_splat_op)(_no_rasteriser)

"""Custom family: ``umap.knn`` on the GPU (custom_knn: one workgroup per row, lane-local sorted
candidates merged by k rounds of a workgroup tree); ``llada2.group_limited_gate`` and a kNN with k past
``KNN_MAX_K`` or a non-f32 input run as host steps; Gaussian splatting is not lowered at all (no
rasteriser yet)."""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.custom import UMAP_KNN, knn_k
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET, row_lanes
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers, not_lowered

CUSTOM_KNN = kernel("custom_knn", params("CustomKnnParams", n=U32, x=U32, y=U32),
                    dtypes=accepts(DType.F32, out=DType.F32), workgroup=(64, 1, 1),
                    shared_bytes=lambda s: 3 * 4 * int(s["WG"]), sizes={"K": 15})
#: Largest k kept in registers (two arrays of k per lane).
KNN_MAX_K = 64

#: Ops with no lowering at all, with the reason.
NOT_LOWERED_OPS: dict[type[ops.Op], str] = {
    op: "Gaussian splatting is not implemented (no rasteriser yet)"
    for op in (ops.GaussianSplatRender, ops.GaussianSplatRenderBackward, ops.GaussianSplatPrepare,
               ops.GaussianSplatRasterize)
}


def knn_fits(n: int, k: int, lanes: int) -> bool:
    """Within the register lists and one invocation's loop budget (a column scan whose every column
    is inserted k deep, k rounds of the tree)."""
    per_lane = -(-n // lanes)
    return k <= KNN_MAX_K and per_lane * (k + 1) + k * 10 < LOOP_BUDGET


@lowers(ops.Custom)
def lower_custom(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.Custom = node.op  # type: ignore[assignment]
    (x, *_) = ctx.inputs(node)
    if op.name != UMAP_KNN or x.dtype is not DType.F32:
        return host_steps(node, ctx)
    n, k = int(x.shape[0]), knn_k(op.attr_bytes)
    lanes = row_lanes(n)
    if not knn_fits(n, k, lanes):
        return host_steps(node, ctx)
    return [ctx.dispatch(CUSTOM_KNN, node, ctx.grid_rows(n), {"WG": lanes, "K": k}, False, n=n,
                         x=ctx.offset(x), y=ctx.offset(node))]


for _op, _reason in NOT_LOWERED_OPS.items():
    not_lowered(_op, _reason)

"""Custom family: Custom ops run as host steps (their numpy references); Gaussian splatting is not
lowered at all (no rasteriser yet)."""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers, not_lowered

#: Ops lowered as host steps, with the reason each has no kernel yet.
HOST_OPS: dict[type[ops.Op], str] = {
    ops.Custom: "custom ops are host steps",
}

#: Ops with no lowering at all, with the reason.
NOT_LOWERED_OPS: dict[type[ops.Op], str] = {
    op: "Gaussian splatting is not implemented (no rasteriser yet)"
    for op in (ops.GaussianSplatRender, ops.GaussianSplatRenderBackward, ops.GaussianSplatPrepare,
               ops.GaussianSplatRasterize)
}


@lowers(*HOST_OPS)
def lower_custom_on_host(node: Node, ctx: LowerCtx) -> list[Step]:
    return host_steps(node, ctx)


for _op, _reason in NOT_LOWERED_OPS.items():
    not_lowered(_op, _reason)

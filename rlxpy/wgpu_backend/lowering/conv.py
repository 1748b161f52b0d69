"""Conv family: Conv, ConvTranspose, Pool, AdaptivePool and Im2Col run as host steps (their numpy
references)."""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

#: Ops lowered as host steps, with the reason each has no kernel yet.
HOST_OPS: dict[type[ops.Op], str] = {
    ops.Conv: "no conv kernel yet",
    ops.Pool: "no pool kernel yet",
    ops.Im2Col: "im2col is a host op: no kernel yet",
    ops.ConvTranspose: "no transposed-conv kernel yet",
    ops.AdaptivePool: "no adaptive-pool kernel yet",
}


@lowers(*HOST_OPS)
def lower_conv_on_host(node: Node, ctx: LowerCtx) -> list[Step]:
    return host_steps(node, ctx)

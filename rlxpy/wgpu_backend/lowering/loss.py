"""Loss family: LogSoftmax and CrossEntropy."""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

#: Ops lowered as host steps, with the reason each has no kernel yet.
HOST_OPS: dict[type[ops.Op], str] = {
    ops.LogSoftmax: "loss ops run on the host until their kernels land",
    ops.CrossEntropy: "loss ops run on the host until their kernels land",
}


@lowers(*HOST_OPS)
def lower_loss_on_host(node: Node, ctx: LowerCtx) -> list[Step]:
    return host_steps(node, ctx)

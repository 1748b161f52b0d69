"""Backward family: every backward op runs as a host step (its numpy reference)."""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

#: Ops lowered as host steps, with the reason each has no kernel yet.
HOST_OPS: dict[type[ops.Op], str] = {
    ops.RmsNormBackwardInput: "backward ops run on the host",
    ops.RmsNormBackwardGamma: "backward op",
    ops.RmsNormBackwardBeta: "backward op",
    ops.LayerNormBackwardInput: "backward op",
    ops.LayerNormBackwardGamma: "backward op",
    ops.RopeBackward: "backward op",
    ops.CumsumBackward: "backward op",
    ops.GatherBackward: "backward op",
    ops.AttentionBackward: "backward op",
    ops.CrossEntropyBackward: "backward op",
}


@lowers(*HOST_OPS)
def lower_backward_on_host(node: Node, ctx: LowerCtx) -> list[Step]:
    return host_steps(node, ctx)

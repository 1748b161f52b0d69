"""Gradient rules of the scan family: SelectiveScan through the backward family's
SelectiveScanBackward, one node for every input that needs a gradient (the states recomputed once,
the five gradients in one flat output, each a view of its slice).

GatedDeltaNet goes the same way through GatedDeltaNetBackward. A carried state (``carry_state``) is
an inference cache (prefill then decode) and has no rule.
"""

from __future__ import annotations

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node

_PARTS = ("x", "delta", "A", "Bm", "Cm")
_DELTA_PARTS = ("q", "k", "v", "g", "beta")


@vjp(ops.SelectiveScan)
def grad_selective_scan(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    return _flat_grads(ctx, node, dy, ops.SelectiveScanBackward(node.op.state_size), _PARTS)


@vjp(ops.GatedDeltaNet)
def grad_gated_delta_net(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    return _flat_grads(ctx, node, dy, ops.GatedDeltaNetBackward(node.op.state_size), _DELTA_PARTS)


def _flat_grads(ctx: GradContext, node: Node, dy: Node, backward: ops.Op, parts: tuple[str, ...]
                ) -> list[Node | None]:
    """One backward node for every input that needs a gradient, each gradient a view of its slice."""
    if node.op.carry_state:
        raise UnsupportedOpError(f"{where(node)}: {type(node.op).__name__} with carry_state (an inference "
                                 "cache) has no gradient rule; differentiate the scan without a carried "
                                 "state")
    ins = ctx.inputs(node)
    wanted = [ctx.needs(node, i) for i in range(len(parts))]
    if not any(wanted):
        return [None] * len(ins)
    flat = ctx.g.apply(backward, [*ins, dy], ctx.name(node, "all"))
    grads: list[Node | None] = []
    start = 0
    for index, t in enumerate(ins):
        if wanted[index]:
            part = ctx.g.narrow(flat, 0, start, t.numel)
            grads.append(ctx.g.reshape(part, t.shape, ctx.name(node, parts[index])))
        else:
            grads.append(None)
        start += t.numel
    return grads

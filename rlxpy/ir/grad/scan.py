"""Gradient rules of the scan family: SelectiveScan through the backward family's
SelectiveScanBackward, one node for every input that needs a gradient (the states recomputed once,
the five gradients in one flat output, each a view of its slice).

A carried state (``carry_state``) is an inference cache (prefill then decode) and has no rule;
GatedDeltaNet has none yet.
"""

from __future__ import annotations

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node

_PARTS = ("x", "delta", "A", "Bm", "Cm")


@vjp(ops.SelectiveScan)
def grad_selective_scan(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    op: ops.SelectiveScan = node.op  # type: ignore[assignment]
    if op.carry_state:
        raise UnsupportedOpError(f"{where(node)}: SelectiveScan with carry_state (an inference cache) has "
                                 "no gradient rule; differentiate the scan without a carried state")
    ins = ctx.inputs(node)
    wanted = [ctx.needs(node, i) for i in range(len(_PARTS))]
    if not any(wanted):
        return [None] * len(ins)
    flat = ctx.g.apply(ops.SelectiveScanBackward(op.state_size), [*ins, dy], ctx.name(node, "all"))
    grads: list[Node | None] = []
    start = 0
    for index, t in enumerate(ins):
        if wanted[index]:
            part = ctx.g.narrow(flat, 0, start, t.numel)
            grads.append(ctx.g.reshape(part, t.shape, ctx.name(node, _PARTS[index])))
        else:
            grads.append(None)
        start += t.numel
    return grads

"""Unfuse expansions of the control-flow ops If and While."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import BinaryOp, CmpOp
from rlxpy.ir.passes.unfuse import Unfuser, expands


@expands(ops.If)
def expand_if(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    """Both branches inlined on the captures, then ``Where(pred, then_out, else_out)``: both
    always run (a GPU schedule has no branches); pred broadcasts through Reshape + Expand."""
    op: ops.If = node.op  # type: ignore[assignment]
    pred, captures = args[0], args[1:]
    (then_out,) = unfuser.inline(op.then_branch, captures, f"{name}/then")
    (else_out,) = unfuser.inline(op.else_branch, captures, f"{name}/else")
    if pred.rank > then_out.rank:  # a one-element pred such as [1, 1] for a [3] output
        pred = unfuser.reshape(pred, (), f"{name}/pred_scalar")
    return unfuser.emit(ops.Where(), [pred, then_out, else_out], name, exact=True)


def _flag(unfuser: Unfuser, pred: Node, step: str) -> Node:
    """cond's one-element output as an f32 scalar 0/1: ``pred != 0`` (NaN -> 1), like Where."""
    truth = pred
    if pred.dtype is not DType.BOOL:
        zero = unfuser.constant(np.zeros(pred.shape), pred.dtype, f"{step}/zero")
        truth = unfuser.emit(ops.Compare(CmpOp.NE), [pred, zero], f"{step}/truth")
    truth = unfuser.reshape(truth, (), f"{step}/truth_scalar")
    return unfuser.emit(ops.Cast(DType.F32), [truth], f"{step}/flag")


@expands(ops.While)
def expand_while(unfuser: Unfuser, node: Node, args: list[Node], name: str) -> Node:
    """Unrolled max_iterations times: ``active *= (cond(state) != 0)``, then
    ``state_j = Where(active, body(state)_j, state_j)``; once cond is false the state is frozen.
    The flags are multiplied as 0/1 (not the raw cond value) so a NaN cond cannot keep a loop
    alive after a later false one. Only state[0] is produced in the last iteration."""
    op: ops.While = node.op  # type: ignore[assignment]
    state = list(args)
    carried = len(op.body.outputs)
    total = op.max_iterations or 0
    active: Node | None = None
    for i in range(total):
        step = f"{name}/iter{i}"
        (pred,) = unfuser.inline(op.cond, state, f"{step}/cond")
        flag = _flag(unfuser, pred, step)
        active = flag if active is None else unfuser.emit(ops.Binary(BinaryOp.MUL), [active, flag],
                                                          f"{step}/active")
        new = unfuser.inline(op.body, state, f"{step}/body")
        last = i == total - 1
        for j in range(1 if last else carried):
            target = name if last else f"{step}/state{j}"
            state[j] = unfuser.emit(ops.Where(), [active, new[j], state[j]], target, exact=last)
    return state[0]

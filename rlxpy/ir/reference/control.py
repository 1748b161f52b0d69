"""Reference semantics of the control family (If, While), with real control flow, never by
unfusing: the unfuse pass is checked against these."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference, run_reference


def run_branch(graph, values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate a sub-graph with its Inputs bound positionally to ``values``; its outputs in order."""
    inputs = {node.op.name: value for node, value in zip(graph.inputs(), values)}
    results = run_reference(graph, inputs)
    return [results[graph.nodes[o].name] for o in graph.outputs]


def _truthy(value: np.ndarray) -> bool:
    return bool(value.reshape(()) != 0)  # NaN != 0: true, as Where


# -- control flow -------------------------------------------------------------------------------
@reference(ops.If)
def ref_if(op: ops.If, args, node):
    pred, captures = args[0], args[1:]
    if pred.size == 1:  # a real branch: only the taken side runs
        branch = op.then_branch if _truthy(pred) else op.else_branch
        return run_branch(branch, captures)[0]
    (on_true,) = run_branch(op.then_branch, captures)
    (on_false,) = run_branch(op.else_branch, captures)
    return np.where(pred != 0, on_true, on_false)


@reference(ops.While)
def ref_while(op: ops.While, args, node):
    state = list(args)
    for _ in range(op.max_iterations):
        (pred,) = run_branch(op.cond, state)
        if not _truthy(pred):
            break
        new = run_branch(op.body, state)
        state[: len(new)] = new
    return state[0]

"""Control family: If and While, composites expanded by ir/passes/unfuse_control.py.

If and While hold their branches as sub-graphs (rlxpy.ir.graph.Graph; this module sees them as
a Branch, so the ops never import the graph module built on them). A sub-graph's Inputs are
bound positionally, in node order, to the op's inputs. Sub-graphs may not declare Params: an
outer Param is passed in as a capture instead, so the op's inputs are its whole data dependency
and ``graph.params()`` of the outer graph stays the complete list of weights to set.

Documented in docs/ops.md#control (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rlxpy.ir.ops.base import Op, TensorType, need
from rlxpy.ir.shape import broadcast_shapes, format_shape, is_static


@runtime_checkable
class Branch(Protocol):
    """What If and While need of a sub-graph; rlxpy.ir.graph.Graph is one. ``nodes`` in order (each
    with ``name``, ``op``, ``type``), ``outputs`` (node ids), ``inputs()`` and ``params()``."""

    name: str
    nodes: list[Any]
    outputs: list[int]

    def inputs(self) -> list[Any]: ...

    def params(self) -> list[Any]: ...


# -- sub-graphs ---------------------------------------------------------------------------------
class SubGraph:
    """How If/While hand a branch to serialize.py (``attrs()`` wraps each branch in one): it encodes
    a SubGraph as ``{"$graph": ...}`` and decodes that back into a graph."""

    def __init__(self, graph: Branch) -> None:
        self.graph = graph

    def __repr__(self) -> str:
        outs = ", ".join(str(self.graph.nodes[o].type) for o in self.graph.outputs)
        return f"<graph {self.graph.name!r}: {len(self.graph.nodes)} nodes -> ({outs})>"


def _unwrap(value: Any) -> Any:
    return value.graph if isinstance(value, SubGraph) else value


class _SubGraphFields:
    """Mixed into If and While (not an Op itself, so it is not registered as one): sub-graph
    fields unwrap a SubGraph on construction, and attrs() wraps them for JSON."""

    _graph_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for field in self._graph_fields:
            object.__setattr__(self, field, _unwrap(getattr(self, field)))

    def attrs(self) -> dict[str, Any]:
        values = super().attrs()  # type: ignore[misc]
        for field in self._graph_fields:
            values[field] = SubGraph(values[field])
        return values

    def subgraphs(self) -> dict[str, Branch]:
        return {field: getattr(self, field) for field in self._graph_fields}


def check_subgraph(graph: Any, what: str, bound: Sequence[TensorType],
                   outputs: int | None) -> list[TensorType]:
    """Check a branch against the types bound to its Inputs; return its output types.

    ``outputs`` is the required output count, or None for "at least one"."""
    need(isinstance(graph, Branch), f"{what} must be a Graph, got {type(graph).__name__}")
    params = [n.name for n in graph.params()]
    need(not params, f"{what} declares Params {params}: pass the outer Param as a capture input instead")
    inputs = graph.inputs()
    names = [n.op.name for n in inputs]
    need(len(set(names)) == len(names), f"{what} has duplicate Input names {names}")
    need(len(inputs) == len(bound), f"{what} has {len(inputs)} Inputs, but {len(bound)} values are bound to "
         "them (positionally, in node order)")
    for node, have in zip(inputs, bound):
        need(node.type == have,
             f"{what} Input {node.name!r} is {node.type}, but the value bound to it is {have}")
    count = len(graph.outputs)
    if outputs is None:
        need(count >= 1, f"{what} has no outputs: mark one with graph.output(node)")
    else:
        need(count == outputs, f"{what} has {count} outputs, needs exactly {outputs}")
    return [graph.nodes[o].type for o in graph.outputs]


# -- control flow -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class If(_SubGraphFields, Op):
    """``then_branch(*captures) if pred else else_branch(*captures)``; inputs ``[pred, *captures]``.

    Each branch has exactly one output, and both outputs share one type. ``pred`` is truthy where
    it is != 0 (NaN counts as true, like Where); a one-element pred (any rank) picks a branch, a
    larger one selects element-wise (it must broadcast to the output's shape). Unfused into both branches
    inlined + ``Where(pred, then, else)``: both always run. Like ``torch.cond`` / ``lax.cond``
    with a scalar pred."""

    then_branch: Branch
    else_branch: Branch
    arity = (1, None)
    composite = True
    _graph_fields = ("then_branch", "else_branch")

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        pred, captures = ins[0], list(ins[1:])
        (then_out,) = check_subgraph(self.then_branch, "then_branch", captures, 1)
        (else_out,) = check_subgraph(self.else_branch, "else_branch", captures, 1)
        need(then_out == else_out, f"branch outputs differ: then {then_out}, else {else_out}")
        try:
            joint = broadcast_shapes(pred.shape, then_out.shape)
        except ValueError:
            joint = None
        single = is_static(pred.shape) and math.prod(pred.shape) == 1  # type: ignore[arg-type]
        need(single or joint == tuple(then_out.shape),
             f"pred {pred} must hold one element or broadcast to the branch output "
             f"{format_shape(then_out.shape)}")
        return then_out


@dataclass(frozen=True, eq=False)
class While(_SubGraphFields, Op):
    """``while cond(*state): state[:k] = body(*state)``, at most ``max_iterations`` times; returns
    ``state[0]``. Inputs are the initial state; the body's k outputs replace the first k of them
    each iteration (same types) and the rest stay fixed (captures, e.g. weights).

    ``cond`` has one output of one element, truthy where != 0 (NaN is true). ``max_iterations``
    is required: the unfuse pass unrolls the loop that many times with an "active" flag, so the
    cost is always max_iterations bodies, and the state is frozen once cond turns false (the
    result equals ``torch._higher_order_ops.while_loop`` / ``lax.while_loop`` when the loop ends
    within the bound, and the state after max_iterations steps otherwise)."""

    cond: Branch
    body: Branch
    max_iterations: int | None = None
    arity = (1, None)
    composite = True
    _graph_fields = ("cond", "body")

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        need(self.max_iterations is not None,
             "max_iterations is required: the unfuse pass unrolls the loop that many times")
        need(isinstance(self.max_iterations, int) and self.max_iterations >= 0,  # type: ignore[operator]
             f"max_iterations must be an int >= 0, got {self.max_iterations!r}")
        state = list(ins)
        (pred,) = check_subgraph(self.cond, "cond", state, 1)
        need(is_static(pred.shape) and math.prod(pred.shape) == 1,  # type: ignore[arg-type]
             f"cond's output must hold one element, got {pred}")
        outs = check_subgraph(self.body, "body", state, None)
        need(len(outs) <= len(state),
             f"body has {len(outs)} outputs but the loop state has {len(state)} values")
        for i, (new, old) in enumerate(zip(outs, state)):
            need(new == old, f"body output {i} is {new}, but the state value it replaces is {old}")
        return state[0]


def subgraphs_of(op: Op) -> dict[str, Branch]:
    """The sub-graphs an op holds (empty for ops without control flow)."""
    return op.subgraphs() if isinstance(op, _SubGraphFields) else {}

"""Symbolic dims: bind a graph's symbols to sizes, or infer the sizes from input arrays."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from rlxpy.errors import GraphError, InputError
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph
from rlxpy.ir.passes.rewrite import copy_graph, with_op
from rlxpy.ir.shape import Sym, format_shape


def _bind_value(value: Any, binding: Mapping[str, int]) -> Any:
    if isinstance(value, Graph):  # sub-graphs of If/While
        return bind_graph(value, binding)
    if hasattr(value, "graph") and isinstance(value.graph, Graph):
        return dataclasses.replace(value, graph=bind_graph(value.graph, binding))
    if isinstance(value, Sym):
        return binding.get(value.name, value)
    if isinstance(value, tuple):
        return tuple(_bind_value(v, binding) for v in value)
    return value


def bind_graph(graph: Graph, binding: Mapping[str, int]) -> Graph:
    """A copy of ``graph`` with every symbol in ``binding`` replaced by its size (same names)."""
    replace = {}
    for node in graph.nodes:
        changes = {}
        for f in dataclasses.fields(node.op):  # type: ignore[arg-type]
            value = getattr(node.op, f.name)
            bound = _bind_value(value, binding)
            if bound is not value:
                changes[f.name] = bound
        if changes:
            replace[node.id] = with_op(node, dataclasses.replace(node.op, **changes))  # type: ignore[type-var]
    return copy_graph(graph, replace)


def infer_binding(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, int]:
    """Sizes of the symbols of the graph's inputs, read from the arrays given for them.

    An input may have several symbolic dims only if the array's shape gives each of them (same
    rank); a flat array may carry one symbolic dim. The same symbol must agree everywhere."""
    binding: dict[str, int] = {}
    for node in graph.inputs():
        name = node.op.name
        if name not in inputs:
            continue
        shape = getattr(inputs[name], "shape", None)
        syms = [d for d in node.shape if isinstance(d, Sym)]
        if not syms:
            continue
        if shape is not None and len(shape) == len(node.shape):
            found = {d.name: int(s) for d, s in zip(node.shape, shape) if isinstance(d, Sym)}
        else:
            if len(syms) > 1:
                raise InputError(f"input {name!r} {format_shape(node.shape)} has several symbolic dims: "
                                 "pass an array of that rank or compile(..., bindings=...)")
            static = math.prod(d for d in node.shape if isinstance(d, int))
            size = int(getattr(inputs[name], "size", len(inputs[name])))
            if static == 0 or size % static:
                raise InputError(f"input {name!r}: {size} values do not fit {format_shape(node.shape)}")
            found = {syms[0].name: size // static}
        for sym, size in found.items():
            if binding.get(sym, size) != size:
                raise InputError(f"symbol {sym} is {binding[sym]} from one input and {size} from {name!r}")
            binding[sym] = size
    missing = graph.symbols() - set(binding)
    if missing:
        raise InputError(f"cannot infer symbols {sorted(missing)} from the inputs given; "
                         "pass them with compile(graph, bindings={...})")
    return binding


def check_binding(graph: Graph, binding: Mapping[str, int]) -> None:
    unknown = set(binding) - graph.symbols()
    if unknown:
        raise GraphError(f"bindings name symbols {sorted(unknown)} that graph {graph.name!r} does not use "
                         f"(it uses {sorted(graph.symbols())})")
    bad = {k: v for k, v in binding.items() if not isinstance(v, int) or v < 0}
    if bad:
        raise GraphError(f"bindings must be non-negative ints, got {bad}")


def is_input_or_param(node: Any) -> bool:
    return isinstance(node.op, (ops.Input, ops.Param))

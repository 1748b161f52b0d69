"""The reference registry and interpreter: ``@reference(ops.X)`` registers the numpy semantics of an
op, ``run_reference`` walks a graph with them.

The family modules (``reference/<family>.py``) import this module and register into ``REFERENCE``;
the package (``reference/__init__.py``) imports every family, so the registry is full once
``rlxpy.ir.reference`` (or any module in it) is imported. Nothing here imports a family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlxpy.errors import GraphError, InputError, RegistryError, UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import from_storage
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.passes.dynamic import bind_graph, infer_binding
from rlxpy.ir.shape import format_shape
from rlxpy.ir.values import check_value

RefFn = Callable[[Any, list[np.ndarray], "Node"], np.ndarray]
REFERENCE: dict[type[ops.Op], RefFn] = {}


def reference(op_type: type[ops.Op]) -> Callable[[RefFn], RefFn]:
    """Register the numpy semantics of ``op_type``; a second registration is an error."""

    def register(fn: RefFn) -> RefFn:
        if op_type in REFERENCE:
            raise RegistryError(
                f"{op_type.__name__} already has a reference in {REFERENCE[op_type].__module__}"
            )
        REFERENCE[op_type] = fn
        return fn

    return register


def reference_of(op_type: type[ops.Op]) -> RefFn:
    """The reference function of ``op_type``."""
    if op_type not in REFERENCE:
        raise UnsupportedOpError(f"{op_type.__name__} has no reference implementation")
    return REFERENCE[op_type]


def run_reference(
    graph: Graph,
    inputs: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    keep_all: bool = False,
) -> dict[str, np.ndarray]:
    """Evaluate ``graph`` in numpy. Returns {output name: array} (every node if ``keep_all``)."""
    inputs = dict(inputs or {})
    params = dict(params or {})
    if graph.symbols():  # symbolic dims: bind them from the input arrays, as compile() does
        graph = bind_graph(graph, infer_binding(graph, inputs))
    values: dict[int, np.ndarray] = {}
    users = graph.consumers()
    remaining = {i: len(u) for i, u in users.items()}
    # tensors an op updates in place (a carried state) are copied: the caller's arrays stay as given
    mutated = {n.inputs[k] for n in graph.nodes for k in n.op.mutated_inputs()}
    for node in graph.nodes:
        op = node.op
        if isinstance(op, ops.Input):
            if op.name not in inputs:
                raise InputError(f"missing input {op.name!r} ({node.type})")
            values[node.id] = check_value(node, inputs[op.name], "input")
        elif isinstance(op, ops.Param):
            if op.name not in params:
                raise InputError(f"missing param {op.name!r} ({node.type})")
            values[node.id] = check_value(node, params[op.name], "param")
        elif isinstance(op, ops.Constant):
            raw = np.frombuffer(op.data, dtype=op.dtype.storage_numpy).reshape(node.shape)
            values[node.id] = from_storage(raw, op.dtype).astype(op.dtype.numpy)
        else:
            fn = REFERENCE.get(type(op))
            if fn is None:
                raise UnsupportedOpError(f"{where(node)}: no reference implementation")
            args = [values[i] for i in node.inputs]
            out = np.asarray(fn(op, args, node))
            if out.shape != tuple(node.shape):
                raise GraphError(
                    f"{where(node)}: reference produced {format_shape(out.shape)}, "
                    f"node declares {format_shape(node.shape)}"
                )
            values[node.id] = out.astype(node.dtype.numpy, copy=False)
        if node.id in mutated:
            values[node.id] = values[node.id].copy()
        if not keep_all:  # free intermediates once their last reader ran
            for i in node.inputs:
                remaining[i] -= 1
                if remaining[i] == 0 and i not in graph.outputs:
                    values.pop(i, None)
    chosen = range(len(graph.nodes)) if keep_all else graph.outputs
    return {graph.nodes[i].name: values[i] for i in chosen}

"""The verify pass: the first check of the compile flow (before unfuse, patterns and lowering)."""

from __future__ import annotations

from rlxpy.errors import GraphError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph
from rlxpy.ir.ops.control import subgraphs_of


def verify(graph: Graph) -> Graph:
    """Raise GraphError unless ``graph`` is well formed; return it.

    On top of ``Graph.verify`` (node order and wiring, unique node names, every stored type still
    infers, outputs in range): the graph has outputs, Input and Param names are unique (one
    namespace for both, since a name that is both an Input and a Param is a mix-up waiting to
    happen), and the sub-graphs of If/While pass the same checks."""
    if not getattr(graph, "outputs", None):
        raise GraphError(f"graph {graph.name!r} has no outputs: call graph.output(node)")
    graph.verify()
    seen: dict[str, str] = {}
    for node in graph.nodes:
        if isinstance(node.op, (ops.Input, ops.Param)):
            kind, label = type(node.op).__name__, node.op.name
            if label in seen:
                raise GraphError(f"{where(node)}: {kind} name {label!r} is already used by {seen[label]}")
            seen[label] = where(node)
        for field, sub in subgraphs_of(node.op).items():
            try:
                verify(sub)
            except GraphError as e:
                raise GraphError(f"{where(node)}: {field}: {e}") from None
    return graph

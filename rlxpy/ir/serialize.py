"""JSON (de)serialisation and the human-readable listing of a graph.

It works on graph_core.GraphCore and is given the class to build when decoding (``from_json(text,
Graph)``), so graph.py imports this module and not the other way round. If/While branches
(ops.control.SubGraph) encode as ``{"$graph": ...}`` and decode into that class too.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from typing import Any, TypeVar

from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph_core import GraphCore
from rlxpy.ir.ops.control import SubGraph
from rlxpy.ir.shape import Sym, format_shape

G = TypeVar("G", bound=GraphCore)


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return {"$enum": type(value).__name__, "name": value.name}
    if isinstance(value, Sym):
        return {"$sym": value.name}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, SubGraph):  # the branches of control-flow ops
        return {"$graph": to_dict(value.graph)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # region chain steps
        return [_encode(getattr(value, f.name)) for f in dataclasses.fields(value)]
    return value


def _decode(value: Any, graph_type: type[GraphCore]) -> Any:
    if isinstance(value, dict):
        if "$enum" in value:
            enums = {**ops.ENUMS, "DType": DType}
            return enums[value["$enum"]][value["name"]]
        if "$sym" in value:
            return Sym(value["$sym"])
        if "$bytes" in value:
            return base64.b64decode(value["$bytes"])
        if "$graph" in value:
            return _graph_from_dict(value["$graph"], graph_type)
    if isinstance(value, list):
        return tuple(_decode(v, graph_type) for v in value)
    return value


def to_dict(graph: GraphCore) -> dict[str, Any]:
    return {
        "name": graph.name,
        "nodes": [{"op": type(n.op).__name__, "name": n.name, "inputs": list(n.inputs),
                   "attrs": {k: _encode(v) for k, v in n.op.attrs().items()}} for n in graph.nodes],
        "outputs": list(graph.outputs),
    }


def to_json(graph: GraphCore) -> str:
    return json.dumps(to_dict(graph), indent=1)


def _graph_from_dict(data: dict[str, Any], graph_type: type[G]) -> G:
    graph = graph_type(data.get("name", "graph"))
    for entry in data["nodes"]:
        op_type = ops.OP_TYPES.get(entry["op"])
        if op_type is None:
            raise GraphError(f"{entry.get('name', '?')}: unknown op {entry['op']!r} in JSON")
        fields = {f.name for f in dataclasses.fields(op_type)}
        attrs = {k: _decode(v, graph_type) for k, v in entry["attrs"].items() if k in fields}
        graph.apply(op_type(**attrs), entry["inputs"], entry["name"])
    graph.output(*data["outputs"])
    return graph


def from_json(text: str, graph_type: type[G]) -> G:
    """The graph ``to_json`` wrote, built as a ``graph_type`` (graph.Graph: ``Graph.from_json``)."""
    return _graph_from_dict(json.loads(text), graph_type)


def _attr_text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return value.name.lower()
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, tuple) and all(isinstance(v, (int, Sym)) for v in value):
        return format_shape(value)
    return repr(value)


def pretty(graph: GraphCore) -> str:
    """One line per node: ``%3 h = MatMul(%1 x, %2 w) [axis=..] -> f32[4, 8]``; outputs marked *."""
    lines = [f"graph {graph.name} ({len(graph.nodes)} nodes)"]
    for n in graph.nodes:
        args = ", ".join(f"%{i} {graph.nodes[i].name}" for i in n.inputs)
        attrs = {k: v for k, v in n.op.attrs().items() if k not in ("name", "shape", "dtype", "data")}
        attr_text = " [" + ", ".join(f"{k}={_attr_text(v)}" for k, v in attrs.items()) + "]" if attrs else ""
        mark = "*" if n.id in graph.outputs else " "
        lines.append(f"{mark}%{n.id:<4} {n.name} = {type(n.op).__name__}({args}){attr_text} -> {n.type}")
    return "\n".join(lines)

"""JSON (de)serialisation and the human-readable listing of a Graph."""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from typing import TYPE_CHECKING, Any

from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.shape import Sym, format_shape

if TYPE_CHECKING:
    from rlxpy.ir.graph import Graph


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return {"$enum": type(value).__name__, "name": value.name}
    if isinstance(value, Sym):
        return {"$sym": value.name}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if hasattr(value, "to_json_dict"):  # sub-graphs of control-flow ops
        return {"$graph": value.to_json_dict()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # region chain steps
        return [_encode(getattr(value, f.name)) for f in dataclasses.fields(value)]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "$enum" in value:
            enums = {**ops.ENUMS, "DType": DType}
            return enums[value["$enum"]][value["name"]]
        if "$sym" in value:
            return Sym(value["$sym"])
        if "$bytes" in value:
            return base64.b64decode(value["$bytes"])
        if "$graph" in value:
            return _graph_from_dict(value["$graph"])
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def to_dict(graph: Graph) -> dict[str, Any]:
    return {
        "name": graph.name,
        "nodes": [{"op": type(n.op).__name__, "name": n.name, "inputs": list(n.inputs),
                   "attrs": {k: _encode(v) for k, v in n.op.attrs().items()}} for n in graph.nodes],
        "outputs": list(graph.outputs),
    }


def to_json(graph: Graph) -> str:
    return json.dumps(to_dict(graph), indent=1)


def _graph_from_dict(data: dict[str, Any]) -> Graph:
    from rlxpy.ir.graph import Graph

    graph = Graph(data.get("name", "graph"))
    for entry in data["nodes"]:
        op_type = ops.OP_TYPES.get(entry["op"])
        if op_type is None:
            raise GraphError(f"{entry.get('name', '?')}: unknown op {entry['op']!r} in JSON")
        fields = {f.name for f in dataclasses.fields(op_type)}
        attrs = {k: _decode(v) for k, v in entry["attrs"].items() if k in fields}
        graph.apply(op_type(**attrs), entry["inputs"], entry["name"])
    graph.output(*data["outputs"])
    return graph


def from_json(text: str) -> Graph:
    return _graph_from_dict(json.loads(text))


def _attr_text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return value.name.lower()
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, tuple) and all(isinstance(v, (int, Sym)) for v in value):
        return format_shape(value)
    return repr(value)


def pretty(graph: Graph) -> str:
    """One line per node: ``%3 h = MatMul(%1 x, %2 w) [axis=..] -> f32[4, 8]``; outputs marked *."""
    lines = [f"graph {graph.name} ({len(graph.nodes)} nodes)"]
    for n in graph.nodes:
        args = ", ".join(f"%{i} {graph.nodes[i].name}" for i in n.inputs)
        attrs = {k: v for k, v in n.op.attrs().items() if k not in ("name", "shape", "dtype", "data")}
        attr_text = " [" + ", ".join(f"{k}={_attr_text(v)}" for k, v in attrs.items()) + "]" if attrs else ""
        mark = "*" if n.id in graph.outputs else " "
        lines.append(f"{mark}%{n.id:<4} {n.name} = {type(n.op).__name__}({args}){attr_text} -> {n.type}")
    return "\n".join(lines)

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
import re
from typing import Any, TypeVar

from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph_core import GraphCore
from rlxpy.ir.ops.control import SubGraph
from rlxpy.ir.serialize_check import op_attrs
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


BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\Z")
SYM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


def _decode(value: Any, graph_type: type[GraphCore], where: str) -> Any:
    if isinstance(value, dict):
        return _decode_object(value, graph_type, where)
    if isinstance(value, list):
        return tuple(_decode(v, graph_type, f"{where}[{i}]") for i, v in enumerate(value))
    return value


def _decode_object(value: dict, graph_type: type[GraphCore], where: str) -> Any:
    """``{"$enum": ..}``, ``{"$sym": ..}``, ``{"$bytes": ..}`` or ``{"$graph": ..}``, checked."""
    if "$enum" in value:
        enums = {**ops.ENUMS, "DType": DType}
        kind, name = value["$enum"], value.get("name")
        if not isinstance(kind, str) or kind not in enums:
            raise GraphError(f"{where}: unknown enum {kind!r}")
        if not isinstance(name, str) or name not in enums[kind].__members__:
            raise GraphError(f"{where}: {kind} has no member {name!r}")
        return enums[kind][name]
    if "$sym" in value:
        if not isinstance(value["$sym"], str) or not SYM_NAME.match(value["$sym"]):
            raise GraphError(f"{where}: symbol name {value['$sym']!r} is not an identifier")
        return Sym(value["$sym"])
    if "$bytes" in value:
        if not isinstance(value["$bytes"], str) or not BASE64.match(value["$bytes"]):
            raise GraphError(f"{where}: $bytes is not base64 text")
        return base64.b64decode(value["$bytes"])
    if "$graph" in value:
        return _graph_from_dict(value["$graph"], graph_type, where)
    raise GraphError(f"{where}: an object that is not $enum, $sym, $bytes or $graph ({sorted(value)[:4]})")


def to_dict(graph: GraphCore) -> dict[str, Any]:
    return {
        "name": graph.name,
        "nodes": [{"op": type(n.op).__name__, "name": n.name, "inputs": list(n.inputs),
                   "attrs": {k: _encode(v) for k, v in n.op.attrs().items()}} for n in graph.nodes],
        "outputs": list(graph.outputs),
    }


def to_json(graph: GraphCore) -> str:
    return json.dumps(to_dict(graph), indent=1)


def _field(data: dict, key: str, kind: type | tuple[type, ...], where: str, default: Any = None) -> Any:
    value = data.get(key, default)
    if value is None or not isinstance(value, kind) or isinstance(value, bool) and bool not in (kind,):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        got = "missing" if key not in data else f"a {type(value).__name__}"
        raise GraphError(f"{where}: field {key!r} must be {names}, it is {got}")
    return value


def _node_ids(values: list, where: str) -> list[int]:
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            raise GraphError(f"{where}[{i}] must be a node id, got {v!r}")
    return values


def _graph_from_dict(data: Any, graph_type: type[G], where: str = "JSON graph") -> G:
    if not isinstance(data, dict):
        raise GraphError(f"{where}: expected an object with name, nodes and outputs, got a "
                         f"{type(data).__name__}")
    graph = graph_type(_field(data, "name", str, where, "graph"))
    for index, entry in enumerate(_field(data, "nodes", list, where)):
        at = f"{where}: node #{index}"
        if not isinstance(entry, dict):
            raise GraphError(f"{at}: expected an object, got a {type(entry).__name__}")
        kind, name = _field(entry, "op", str, at), _field(entry, "name", str, at)
        op_type = ops.OP_TYPES.get(kind)
        if op_type is None:
            raise GraphError(f"{name}: unknown op {kind!r} in JSON ({where}, node #{index})")
        at = f"{name} ({kind}), {where} node #{index}"
        inputs = _node_ids(_field(entry, "inputs", list, at), f"{at}: inputs")
        raw = {k: _decode(v, graph_type, f"{at}: attribute {k!r}")
               for k, v in _field(entry, "attrs", dict, at).items()}
        attrs = op_attrs(op_type, raw, at)
        try:
            graph.apply(op_type(**attrs), inputs, name)
        except GraphError as e:  # the op's own checks, which name the node: say where in the JSON
            raise GraphError(f"{e} ({where}, node #{index})") from None
    try:
        graph.output(*_node_ids(_field(data, "outputs", list, where), f"{where}: outputs"))
    except GraphError as e:
        raise GraphError(f"{where}: {e}") from None
    return graph


def from_json(text: str | bytes, graph_type: type[G]) -> G:
    """The graph ``to_json`` wrote, built as a ``graph_type`` (graph.Graph: ``Graph.from_json``).
    Malformed JSON or a malformed graph is a GraphError that names the node and the field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphError(f"JSON graph: not valid JSON ({e.msg}: line {e.lineno} column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise GraphError(f"JSON graph: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except RecursionError:
        raise GraphError("JSON graph: nested too deeply") from None
    return _graph_from_dict(data, graph_type)


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

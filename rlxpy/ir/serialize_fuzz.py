"""A structure-aware fuzzer for the JSON IR loader (``Graph.from_json``, serialize.py; issue 17).

Seeds are serialised real graphs (the tests' transformer block, a CNN, a small llama). A case stacks
one to three mutations of the decoded JSON, drawn from ``numpy.random.default_rng(seed)``: values of
the wrong JSON type anywhere (node fields, attributes, list items), missing keys, unknown ops and
enum members, dangling, negative, forward and self node ids (cycles), deleted, duplicated and
reordered nodes, duplicate names, shapes with negative, zero or huge dims, huge and non-finite
numbers, invalid ``$bytes`` / ``$sym`` / ``$graph`` objects, outputs that are no node; then, on the
text, truncation, byte flips and deep nesting.

:func:`check_case` is the oracle: ``Graph.from_json`` must either load, and then the loaded graph
must serialise and load again to the same JSON (and ``verify`` it, or refuse cleanly), or raise one
of rlxpy's errors whose message says where in the JSON (``JSON graph``, the node and the field) and
leaks no Python internals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlxpy import fuzz
from rlxpy.errors import RlxError
from rlxpy.fuzz import LEAKS, Case, Outcome, Report, byte_mutators, pick
from rlxpy.fuzz import run as run_cases
from rlxpy.ir import ops

JUNK = (None, True, False, 0, -1, 1, 3, 2**31, 2**63, -2**63, 10**30, 1.5, float("nan"), float("inf"), "",
        "x", "Relu", [], [1, 2], [-1], {}, {"$enum": "DType", "name": "F32"}, {"$sym": "T"},
        {"$bytes": "AAAA"}, {"$graph": {}})
DIMS = (0, 1, -1, -2, 2**31, 2**40, 2**62, 10**20, 3)


@dataclass
class Seed:
    """A serialised graph: its JSON text and the decoded structure to copy for each case."""

    name: str
    text: str
    data: dict

    @classmethod
    def from_graph(cls, name: str, graph: Any) -> Seed:
        text = graph.to_json()
        return cls(name, text, json.loads(text))


def _copy(data: Any) -> Any:
    return json.loads(json.dumps(data))


def _nodes(case: Case) -> list:
    nodes = case.content.get("nodes") if isinstance(case.content, dict) else None
    return nodes if isinstance(nodes, list) and nodes else [{}]


def _node(rng: np.random.Generator, case: Case) -> dict:
    node = pick(rng, _nodes(case))
    return node if isinstance(node, dict) else {}


def _label(node: dict) -> str:
    return f"{node.get('name', '?')} ({node.get('op', '?')})"


# -- mutators: (rng, seed, case) -> description ------------------------------------------------------
def m_op(rng, seed, case):
    node = _node(rng, case)
    old = _label(node)
    node["op"] = pick(rng, ("NoSuchOp", "", 7, None, "input", pick(rng, sorted(ops.OP_TYPES))))
    return f"{old} op -> {node['op']!r}"


def m_name(rng, seed, case):
    node = _node(rng, case)
    other = _node(rng, case)
    old = _label(node)
    node["name"] = pick(rng, (other.get("name", "x"), 5, None, "", "n" * 300))
    return f"{old} name -> {str(node['name'])[:20]!r}"


def m_inputs(rng, seed, case):
    nodes = _nodes(case)
    index = int(rng.integers(0, len(nodes)))
    node = nodes[index] if isinstance(nodes[index], dict) else {}
    inputs = node.get("inputs")
    choice = int(rng.integers(0, 5))
    if choice == 0 or not isinstance(inputs, list):
        node["inputs"] = pick(rng, (None, "0", 3, {}, [0, 0, 0, 0]))
        return f"{_label(node)} inputs -> {node['inputs']!r}"
    if choice == 1 and inputs:
        del inputs[int(rng.integers(0, len(inputs)))]
        return f"{_label(node)} an input removed"
    if choice == 2:
        inputs.append(int(rng.integers(0, max(index, 1))))
        return f"{_label(node)} an input added"
    if inputs:
        at = int(rng.integers(0, len(inputs)))
        inputs[at] = pick(rng, (index, index + 1, len(nodes), len(nodes) + 5, -1, 2**63, 1.0, True, "x",
                                None, int(rng.integers(0, max(index, 1)))))
        return f"{_label(node)} input {at} -> {inputs[at]!r}"
    return "no inputs"


def m_attr(rng, seed, case):
    node = _node(rng, case)
    attrs = node.get("attrs")
    if not isinstance(attrs, dict) or not attrs:
        node["attrs"] = pick(rng, (None, [], "x", {"bogus": 1}))
        return f"{_label(node)} attrs -> {node['attrs']!r}"
    key = pick(rng, sorted(attrs))
    choice = int(rng.integers(0, 4))
    if choice == 0:
        del attrs[key]
        return f"{_label(node)} attribute {key} removed"
    if choice == 1:
        attrs[key] = pick(rng, JUNK)
        return f"{_label(node)} attribute {key} -> {attrs[key]!r}"
    attrs[key] = _mutate_value(rng, attrs[key])
    return f"{_label(node)} attribute {key} -> {str(attrs[key])[:60]}"


def _mutate_value(rng: np.random.Generator, value: Any) -> Any:
    """A nearby wrong value of the same shape of JSON: list items, numbers, enum names, bytes."""
    if isinstance(value, list):
        if value and rng.random() < 0.7:
            at = int(rng.integers(0, len(value)))
            value[at] = _mutate_value(rng, value[at]) if isinstance(value[at], (list, dict)) \
                else pick(rng, DIMS + (None, "T", 1.5))
        elif rng.random() < 0.5 and value:
            del value[int(rng.integers(0, len(value)))]
        else:
            value.append(pick(rng, DIMS))
        return value
    if isinstance(value, dict):
        if "$enum" in value:
            key = pick(rng, ("$enum", "name"))
            value[key] = pick(rng, ("BOGUS", "ActKind", "DType", "F32", "RELU", 3, None))
        elif "$bytes" in value:
            text = value["$bytes"]
            value["$bytes"] = pick(rng, (text[: len(text) // 2], text + "A", "!!!!", "", 5, text[:-4]))
        elif "$sym" in value:
            value["$sym"] = pick(rng, ("", "1x", 3, None, "T T"))
        elif "$graph" in value:
            value["$graph"] = _mutate_value(rng, value["$graph"]) if rng.random() < 0.5 else pick(rng, JUNK)
        else:
            key = pick(rng, sorted(value)) if value else "x"
            value[key] = pick(rng, JUNK)
        return value
    if isinstance(value, bool):
        return pick(rng, (not value, 1, "true", None))
    if isinstance(value, (int, float)):
        return pick(rng, (0, -1, 2**62, -2**63, 10**40, 1e308, -1e308, float("nan"), float("inf"), 0.5,
                          value * 2 if isinstance(value, int) else -value, value + 1))
    return pick(rng, JUNK)


def m_shape(rng, seed, case):
    """A dim of a leaf's (or reshape's) shape set to an edge value."""
    shaped = [n for n in _nodes(case) if isinstance(n, dict) and isinstance(n.get("attrs"), dict)
              and isinstance(n["attrs"].get("shape", n["attrs"].get("new_shape")), list)]
    if not shaped:
        return "no shapes"
    node = pick(rng, shaped)
    key = "shape" if "shape" in node["attrs"] else "new_shape"
    shape = node["attrs"][key]
    if shape and rng.random() < 0.8:
        shape[int(rng.integers(0, len(shape)))] = pick(rng, DIMS)
    else:
        shape.append(pick(rng, DIMS))
    return f"{_label(node)} {key} -> {shape}"


def m_structure(rng, seed, case):
    nodes = _nodes(case)
    if not isinstance(case.content, dict) or len(nodes) < 2:
        return "too small"
    at = int(rng.integers(0, len(nodes)))
    choice = int(rng.integers(0, 4))
    if choice == 0:
        node = nodes.pop(at)
        return f"node #{at} {_label(node) if isinstance(node, dict) else node} deleted"
    if choice == 1:
        nodes.insert(at, _copy(nodes[at]))
        return f"node #{at} duplicated"
    if choice == 2:
        other = int(rng.integers(0, len(nodes)))
        nodes[at], nodes[other] = nodes[other], nodes[at]
        return f"nodes #{at} and #{other} swapped"
    nodes[at] = pick(rng, (None, [], 3, "node", {}))
    return f"node #{at} -> {nodes[at]!r}"


def m_graph(rng, seed, case):
    data = case.content
    if not isinstance(data, dict):
        return "not an object"
    choice = int(rng.integers(0, 5))
    if choice == 0:
        key = pick(rng, ("nodes", "outputs", "name"))
        data.pop(key, None)
        return f"{key} removed"
    if choice == 1:
        data["outputs"] = pick(rng, ([], [len(_nodes(case))], [-1], ["x"], [0.5], None, [True], 3))
        return f"outputs -> {data['outputs']!r}"
    if choice == 2:
        key = pick(rng, ("nodes", "name"))
        data[key] = pick(rng, JUNK)
        return f"{key} -> {data[key]!r}"
    if choice == 3:
        case.content = pick(rng, ([data], "graph", 3, None, [], {"graph": data}))
        return f"top level -> {type(case.content).__name__}"
    node = _node(rng, case)
    node.pop(pick(rng, ("op", "name", "inputs", "attrs")), None)
    return f"{_label(node)} a key removed"


def m_nesting(rng, seed, case):
    depth = int(pick(rng, (100, 5000, 100000)))
    node = _node(rng, case)
    attrs = node.get("attrs") if isinstance(node.get("attrs"), dict) else {}
    key = pick(rng, sorted(attrs)) if attrs else "deep"

    def nest(raw: bytearray) -> None:
        marker = json.dumps(key).encode() + b": "
        at = raw.find(marker)
        if at >= 0:
            at += len(marker)
            raw[at:at] = b"[" * depth + b"1" + b"]" * depth + b", \"_\": "
    case.edits.append(nest)
    return f"{_label(node)} attribute {key} nested {depth} deep"


MUTATORS = {
    "op": (m_op, 1.0), "name": (m_name, 0.7), "inputs": (m_inputs, 1.5), "attr": (m_attr, 3.0),
    "shape": (m_shape, 1.0), "structure": (m_structure, 1.2), "graph": (m_graph, 0.6),
    "nesting": (m_nesting, 0.2), **byte_mutators(5),
}


def make_case(rng: np.random.Generator, seed: Seed) -> Case:
    """One to three stacked mutations of ``seed``."""
    case = Case(_copy(seed.data), lambda data: json.dumps(data).encode())
    for name in fuzz.weighted(rng, MUTATORS, fuzz.stack_count(rng)):
        case.notes.append(f"{name}: {MUTATORS[name][0](rng, seed, case)}")
    return case


# -- the oracle ------------------------------------------------------------------------------------
def judge_error(path: Path, error: Exception) -> tuple[str, str]:
    """("refused", message) when the message says where in the JSON and leaks no internals."""
    message = str(error)
    if "JSON" not in message:
        return "failure", f"{type(error).__name__} without the JSON location: {message}"
    if LEAKS.search(message):
        return "failure", f"{type(error).__name__} leaking internals: {message}"
    return "refused", message


def _load(path: Path) -> tuple[str, str]:
    from rlxpy.ir import Graph

    graph = Graph.from_json(path.read_bytes())
    text = graph.to_json()
    again = Graph.from_json(text).to_json()
    if again != text:
        return "failure", "loaded, but the graph does not serialise and load back to the same JSON"
    try:
        graph.verify()
    except RlxError as e:
        return ("loaded", "") if judge_error(path, _located(e))[0] == "refused" else ("failure", str(e))
    return "loaded", ""


def _located(error: Exception) -> Exception:
    """verify() speaks of the loaded graph, not of the JSON: its errors count as located."""
    return type(error)(f"JSON graph verified: {error}")


def check_case(path: Path, time_limit: float = 10.0) -> Outcome:
    return fuzz.guarded(path, lambda: _load(path), time_limit, (RlxError,), judge_error)


def run(seeds: list[tuple[Seed, int]], workdir: Path, rng_seed: int = 0, time_limit: float = 10.0,
        progress: Any = None) -> Report:
    """``cases`` mutated JSON files per seed, each checked by :func:`check_case`."""
    return run_cases(seeds, make_case, lambda path, seed: check_case(path, time_limit), workdir, ".json",
                     rng_seed, progress)

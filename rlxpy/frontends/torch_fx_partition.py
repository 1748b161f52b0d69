"""Graph breaks for the torch.compile backend: which nodes of an aten FX graph run on rlxpy.

A node rlxpy cannot take (no translator, a dtype it lacks, or a translator that refused its
arguments) runs in eager torch; the rest is grouped into as few rlxpy subgraphs as dependencies
allow. Grouping is by *stage*: a supported node's stage is the largest stage among its inputs,
plus one past every eager input; an eager node's is the largest among its inputs. Running part 0,
then the eager nodes of stage 0, then part 1, ... never needs a value before it exists, and the
number of parts is the least any split has (the longest chain of alternations).

*Free* nodes (constants, weights and what is computed from weights alone, size arithmetic over the
placeholders) belong to no part: each part that reads one takes its own copy (the translator folds
it at upload time), so a weight never crosses a part boundary as a per-call input.
A part with fewer than ``MIN_COMPUTE_NODES`` nodes that compute (views do not) stays in torch, and
so does a node that would pass a non-tensor value (a tuple) across a boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from rlxpy.frontends.torch_fx_translate import NOT_FOLDABLE, TORCH_TO_RLX, TRANSLATORS, op_key, op_label

#: A part needs this many computing nodes; below it the hand-over costs more than it saves.
MIN_COMPUTE_NODES = 2
#: Ops that only move or re-label data: they do not count as computing nodes.
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "view_copy", "unsqueeze", "squeeze", "flatten", "unflatten",
    "expand", "expand_copy", "permute", "transpose", "t", "numpy_T", "alias", "detach", "clone",
    "contiguous", "lift_fresh_copy", "slice", "select", "split", "split_with_sizes", "unbind", "getitem",
    "view_as"})
#: Values that may cross a boundary between a part and torch.
PASSABLE = (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


@dataclass
class Part:
    """One supported subgraph: its nodes (graph order), the nodes read outside it, and the outside
    values it reads in the order of its module's placeholders (set by torch_fx_stitch.part_module;
    free nodes are copied in, their own sources read)."""

    index: int
    stage: int
    nodes: list[fx.Node]
    inputs: list[fx.Node] = field(default_factory=list)
    outputs: list[fx.Node] = field(default_factory=list)


@dataclass
class Plan:
    parts: list[Part]
    order: list[Part | fx.Node]  # execution order: parts and eager nodes
    free: set[fx.Node]
    problems: dict[fx.Node, tuple[str, str]]  # node -> ("op" | "dtype", label)
    compute: list[fx.Node]  # every staged call_function node, graph order

    def eager_nodes(self) -> list[fx.Node]:
        return [item for item in self.order if isinstance(item, fx.Node)]


def flatten(value: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts (an FX node's args, a multi-output meta)."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in flatten(v)]
    return [value]


def is_scalar_node(node: fx.Node) -> bool:
    """Size arithmetic (SymInt maths, sym_size): the translator reads its meta, never its args."""
    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def is_assert_node(node: fx.Node) -> bool:
    """A runtime assert the translator drops."""
    key = op_key(node.target)
    return key.startswith("_assert") or key.startswith("sym_constrain_range") or key == "_print"


def node_problem(node: fx.Node) -> tuple[str, str] | None:
    """Why rlxpy cannot take ``node`` at all: ("op", aten label) or ("dtype", name); None if it may."""
    if op_key(node.target) not in TRANSLATORS and not is_scalar_node(node):
        return "op", op_label(node.target)
    for source in [node, *node.all_input_nodes]:
        for value in flatten(source.meta.get("val")):
            if isinstance(value, torch.Tensor) and value.dtype not in TORCH_TO_RLX:
                return "dtype", str(value.dtype).removeprefix("torch.")
    return None


def plan_partition(gm: fx.GraphModule, static: set[int], forced: set[fx.Node] = frozenset()) -> Plan:
    """Split ``gm`` into parts; ``forced`` nodes run in torch whatever they are."""
    compute, free, problems = _classify(gm, static, forced)
    eager = set(problems) | (set(forced) - free)
    while True:
        stage = _stages(compute, eager)
        parts = _group(compute, eager, stage)
        pulled = _unfit(parts, eager)
        if not pulled:
            break
        eager |= pulled
    order: list[Part | fx.Node] = []
    by_stage = {part.stage: part for part in parts}
    for level in sorted({stage[n] for n in compute}):
        if level in by_stage:
            order.append(by_stage[level])
        order += [n for n in compute if n in eager and stage[n] == level]
    kept = [part for part in parts if part.outputs]  # a part nothing reads is dead code
    for index, part in enumerate(kept):
        part.index = index
    order = [item for item in order if not isinstance(item, Part) or item.outputs]
    return Plan(kept, order, free, problems, compute)


def _classify(gm: fx.GraphModule, static: set[int], forced: set[fx.Node]
              ) -> tuple[list[fx.Node], set[fx.Node], dict[fx.Node, tuple[str, str]]]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weights = {placeholders[i] for i in static if i < len(placeholders)}
    compute: list[fx.Node] = []
    free: set[fx.Node] = set()
    problems: dict[fx.Node, tuple[str, str]] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            free.add(node)
            continue
        if node.op != "call_function" or is_assert_node(node):
            continue
        problem = node_problem(node)
        if problem is not None:
            problems[node] = problem
        elif node not in forced and _is_free(node, weights, free):
            free.add(node)
            continue
        compute.append(node)
    return compute, free, problems


def _is_free(node: fx.Node, weights: set[fx.Node], free: set[fx.Node]) -> bool:
    """Size arithmetic over placeholders, or a static tensor computed from weights and constants
    alone (what the translator folds on the host)."""
    inputs = node.all_input_nodes
    if is_scalar_node(node):
        return all(i.op == "placeholder" or i in free for i in inputs)
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or any(word in op_key(node.target) for word in NOT_FOLDABLE):
        return False
    if any(isinstance(s, torch.SymInt) for s in val.shape):
        return False
    arguments = flatten(list(node.args) + list(node.kwargs.values()))
    if any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in arguments):
        return False
    return all(i in weights or i in free and not is_scalar_node(i) for i in inputs)


def _stages(compute: list[fx.Node], eager: set[fx.Node]) -> dict[fx.Node, int]:
    stage: dict[fx.Node, int] = {}
    for node in compute:
        level = 0
        for source in node.all_input_nodes:
            if source in stage:
                level = max(level, stage[source] + int(source in eager and node not in eager))
        stage[node] = level
    return stage


def _group(compute: list[fx.Node], eager: set[fx.Node], stage: dict[fx.Node, int]) -> list[Part]:
    parts: dict[int, Part] = {}
    for node in compute:
        if node not in eager:
            parts.setdefault(stage[node], Part(0, stage[node], [])).nodes.append(node)
    for part in parts.values():
        members = set(part.nodes)
        part.outputs = [n for n in part.nodes
                        if any(u not in members and not is_assert_node(u) for u in n.users)]
    return [parts[level] for level in sorted(parts)]


def _unfit(parts: list[Part], eager: set[fx.Node]) -> set[fx.Node]:
    """Nodes to move to torch: whole parts too small to pay off, and nodes on a boundary that
    would hand over something other than a tensor or a number."""
    pulled: set[fx.Node] = set()
    for part in parts:
        if sum(_computes(n) for n in part.nodes) < MIN_COMPUTE_NODES:
            pulled |= set(part.nodes)
            continue
        for node in part.nodes:
            if any(s in eager and not _passable(s) for s in node.all_input_nodes):
                pulled.add(node)
            elif not _passable(node) and any(u in eager for u in node.users):
                pulled.add(node)
    return pulled


def _computes(node: fx.Node) -> bool:
    return op_key(node.target) not in VIEW_OPS and not is_scalar_node(node)


def _passable(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), PASSABLE)


__all__ = ["MIN_COMPUTE_NODES", "Part", "Plan", "flatten", "is_assert_node", "is_scalar_node", "node_problem",
           "plan_partition"]

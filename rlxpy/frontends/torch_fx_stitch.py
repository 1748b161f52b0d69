"""A graph with breaks, made runnable: one GraphModule per rlxpy part, and a stitched GraphModule
that calls the parts and runs the eager nodes between them (torch_fx_partition.py plans the split).

Each part's module takes the outside values it reads as placeholders (weights stay weights: their
placeholders are marked static, and free nodes over them are copied in), so it translates like
any captured graph. Tensors cross boundaries as the CPU tensors the parts return and take.
A translator may still refuse a node of a part (arguments rlxpy cannot take); that node then
runs in torch and the graph is split again.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from rlxpy.errors import UnsupportedOpError
from rlxpy.frontends.torch_fx_partition import Part, Plan, is_assert_node, plan_partition
from rlxpy.frontends.torch_fx_translate import FxTranslator, Translation

#: What runs one part: (the part's GraphModule, its translation) -> a callable returning a list.
MakePart = Callable[[fx.GraphModule, Translation], Callable[..., list[Any]]]


class PartModule(torch.nn.Module):
    """A part's runner as a submodule of the stitched graph."""

    def __init__(self, runner: Callable[..., list[Any]]) -> None:
        super().__init__()
        self.runner = runner

    def forward(self, *args: Any) -> tuple[Any, ...]:
        return tuple(self.runner(*args))


@dataclass
class Partitioned:
    """The callable handed back for a graph with breaks: the stitched module, the part runners
    and what ran where."""

    module: fx.GraphModule
    parts: list[Any]
    rlx_nodes: int
    total_nodes: int
    reasons: list[str] = field(default_factory=list)

    def __call__(self, *args: Any) -> list[Any]:
        return list(self.module(*args))

    @property
    def share(self) -> float:
        return self.rlx_nodes / max(self.total_nodes, 1)

    def message(self) -> str:
        count = len(self.parts)
        return (f"rlxpy: graph break: {'; '.join(self.reasons)}. {self.rlx_nodes} of {self.total_nodes} aten "
                f"nodes ({self.share:.0%}) run on rlxpy in {count} subgraph{'s' * (count != 1)}, the other "
                f"{self.total_nodes - self.rlx_nodes} in eager torch")


def split_graph(gm: fx.GraphModule, static: set[int], make_part: MakePart) -> Partitioned | None:
    """The graph split at the nodes rlxpy cannot take, or None when no part is worth running."""
    forced: set[fx.Node] = set()
    refusals: list[str] = []
    while True:
        plan = plan_partition(gm, static, forced)
        if not plan.parts:
            return None
        built, refused = _translate_parts(gm, plan, static)
        if refused is None:
            break
        culprits, reason = refused
        forced |= culprits
        refusals.append(reason)
    runners = [make_part(module, translation) for module, translation in built]
    module = stitch_module(gm, plan, runners)
    eager = sum(1 for n in module.graph.nodes if n.op == "call_function" and "rlxpy_part" not in n.meta)
    total = sum(1 for n in gm.graph.nodes if n.op == "call_function" and not is_assert_node(n))
    return Partitioned(module, runners, total - eager, total, _reasons(plan) + refusals)


def _translate_parts(gm: fx.GraphModule, plan: Plan, static: set[int]
                     ) -> tuple[list[tuple[fx.GraphModule, Translation]], tuple[set[fx.Node], str] | None]:
    """Translate every part; on a refusal, (the nodes to move to torch, the reason)."""
    built = []
    for part in plan.parts:
        module, part_static, origin = part_module(gm, part, plan.free, static)
        translator = FxTranslator(module, part_static, name=f"torch_fx_part{part.index}")
        try:
            built.append((module, translator.translate()))
        except UnsupportedOpError as e:
            culprit = origin.get(translator.current) if translator.current is not None else None
            return built, ({culprit} if culprit is not None else set(part.nodes), str(e))
    return built, None


def part_module(gm: fx.GraphModule, part: Part, free: set[fx.Node], static: set[int]
                ) -> tuple[fx.GraphModule, set[int], dict[fx.Node, fx.Node]]:
    """(module, its static placeholder indices, its node -> the source graph's node) for one part."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weights = {placeholders[i] for i in static if i < len(placeholders)}
    members = set(part.nodes)
    copied: set[fx.Node] = set()
    sources: dict[fx.Node, None] = {}  # outside values, first use first

    def visit(node: fx.Node) -> None:
        for source in node.all_input_nodes:
            if source in members or source in copied:
                continue
            if source in free:
                copied.add(source)
                visit(source)
            else:
                sources.setdefault(source)

    for node in part.nodes:
        visit(node)
    graph, root = fx.Graph(), torch.nn.Module()
    env: dict[fx.Node, fx.Node] = {}
    part_static = set()
    for index, source in enumerate(sources):
        env[source] = graph.placeholder(source.name)
        env[source].meta["val"] = source.meta.get("val")
        if source in weights:
            part_static.add(index)
    for node in gm.graph.nodes:  # graph order keeps every copy after its inputs
        if node in copied or node in members:
            env[node] = _copy(graph, root, gm, node, env.__getitem__)
    graph.output(tuple(env[n] for n in part.outputs))
    part.inputs = list(sources)  # what the stitched graph passes, in placeholder order
    origin = {new: old for old, new in env.items()}
    return fx.GraphModule(root, graph), part_static, origin


def stitch_module(gm: fx.GraphModule, plan: Plan, runners: list[Callable[..., list[Any]]]) -> fx.GraphModule:
    """The whole graph: each part is one call_module, each eager node a copy of itself; free nodes
    and constants the eager nodes or the outputs read are copied in where first needed."""
    graph, root = fx.Graph(), torch.nn.Module()
    env: dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = graph.placeholder(node.name)
            env[node].meta = dict(node.meta)

    def value(node: fx.Node) -> fx.Node:
        if node not in env:  # a free node or a constant: copied on first use
            env[node] = _copy(graph, root, gm, node, value)
        return env[node]

    for item in plan.order:
        if isinstance(item, Part):
            name = f"rlxpy_part{item.index}"
            root.add_module(name, PartModule(runners[item.index]))
            call = graph.call_module(name, tuple(value(n) for n in item.inputs))
            for index, node in enumerate(item.outputs):
                env[node] = graph.call_function(operator.getitem, (call, index))
                env[node].meta = {"val": node.meta.get("val"), "rlxpy_part": item.index}
        else:
            value(item)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    graph.output(fx.node.map_arg(output.args[0], value))
    return fx.GraphModule(root, graph)


def _copy(graph: fx.Graph, root: torch.nn.Module, gm: fx.GraphModule, node: fx.Node,
          lookup: Callable[[fx.Node], fx.Node]) -> fx.Node:
    """``node`` copied into ``graph``; a constant's value goes onto ``root`` under a flat name."""
    if node.op != "get_attr":
        return graph.node_copy(node, lookup)
    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part)
    name = str(node.target).replace(".", "_")
    if isinstance(value, torch.nn.Module):
        root.add_module(name, value)
    else:
        setattr(root, name, value)
    copy = graph.get_attr(name)
    copy.meta = dict(node.meta)
    return copy


def _reasons(plan: Plan) -> list[str]:
    """'unsupported aten ops: ...' and 'unsupported dtypes: ...' as check_supported words them."""
    ops = sorted({label for kind, label in plan.problems.values() if kind == "op"})
    dtypes = sorted({label for kind, label in plan.problems.values() if kind == "dtype"})
    reasons = []
    if ops:
        reasons.append("unsupported aten ops: " + ", ".join(ops))
    if dtypes:
        reasons.append("unsupported dtypes: " + ", ".join(dtypes))
    return reasons


__all__ = ["MakePart", "PartModule", "Partitioned", "part_module", "split_graph", "stitch_module"]

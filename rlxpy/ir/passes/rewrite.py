"""The pattern engine: one rebuild routine, and the registry of the compile flow's patterns.

A **pattern** is a name, a match function and an emit function:

* ``match(graph) -> [match, ...]`` finds every place where it applies, as typed match data (a
  dataclass of the pattern's own) with two properties the engine reads: ``sites``, the old node ids
  where its new nodes are built (each site is emitted when the copy reaches that node, so the new
  graph keeps the old order), and ``replaced``, the old nodes it stands for or makes dead;
* ``emit(out, remap, match, site) -> {old id: new node}`` builds, with the builder methods of the new
  graph ``out``, the nodes that stand for old ones at one site; ``remap`` maps every old node copied
  or emitted so far to its new node (inputs of the match are found there).

:func:`copy_graph` is the one rebuild every graph-to-graph copy uses (the patterns here, the
importers' clean-up, symbol binding, the f16 shadow): node by node, a node with an emit at its id
runs it; a node that the emit stood for or that is dropped is not copied; every other node is copied
with its inputs remapped. Names of copied nodes and the outputs (names and order) are kept; a node
an emit stands for should carry the old node's name (pass-made helpers take a ``:`` suffix, which
builder names never use).

Adding a pattern: write its match dataclass, match and emit functions in a pattern set
(patterns.py: the decode GEMV fusions; patterns_conv.py: the conv epilogue; patterns_transformer.py: the
transformer patterns) and
``register(Pattern("name", match, emit))`` there. The package (passes/__init__.py) imports both
sets, so the registry is full whenever this module is loaded. :func:`fuse` runs the registered
patterns one after the other (each on the previous one's result) in registration order: the sets
in the order the package imports them, each set's patterns in the order it registers them. The
name is the pattern's key in ``RLX_WGPU_SKIP_PATTERNS`` (the compile flow passes that flag's names
as ``skip``); a name registered twice is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from rlxpy.errors import GraphError, RegistryError
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node

#: old node id -> its node in the graph being built
Remap = Mapping[int, Node]
#: at one old node: build new nodes in ``out`` and return {old id: the new node standing for it}
Emit = Callable[[Graph, Remap], Mapping[int, Node]]


class Match(Protocol):
    """What the engine reads of a pattern's match data."""

    @property
    def sites(self) -> Iterable[int]: ...

    @property
    def replaced(self) -> Iterable[int]: ...


M = TypeVar("M", bound=Match)


def copy_graph(graph: Graph, replace: Mapping[int, Emit] | None = None, drop: Collection[int] = ()) -> Graph:
    """A copy of ``graph``: at old node i, ``replace[i]`` runs first and the nodes it returns stand
    for the old ids they are keyed by; node i is then copied unless something stands for it already
    or it is in ``drop``. Outputs keep their order (each is what stands for the old output)."""
    replace = replace or {}
    out = Graph(graph.name)
    remap: dict[int, Node] = {}
    for node in graph.nodes:
        if node.id in replace:
            remap.update(replace[node.id](out, remap))
        if node.id in remap or node.id in drop:
            continue
        remap[node.id] = out.apply(node.op, [remap[i] for i in node.inputs], node.name)
    out.output(*(remap[i] for i in graph.outputs))
    return out


def with_op(node: Node, op: ops.Op) -> Emit:
    """An emit that copies ``node`` (same inputs and name) with ``op`` instead of its own."""

    def emit(out: Graph, remap: Remap) -> dict[int, Node]:
        return {node.id: out.apply(op, [remap[i] for i in node.inputs], node.name)}

    return emit


def alias(node_id: int, source: int) -> Emit:
    """An emit that makes old node ``node_id`` stand for what ``source`` (an earlier node) became."""

    def emit(out: Graph, remap: Remap) -> dict[int, Node]:
        return {node_id: remap[source]}

    return emit


def rewrite(graph: Graph, matches: Sequence[M], emit: Callable[[Graph, Remap, M, int], Mapping[int, Node]]
            ) -> Graph:
    """``graph`` with every match emitted at its sites and its replaced nodes gone (``graph`` itself
    when there is no match). Two matches may not share a site."""
    emits: dict[int, Emit] = {}
    replaced: set[int] = set()
    for match in matches:
        for site in match.sites:
            if site in emits:
                raise GraphError(f"{graph.nodes[site].name}: two pattern matches are emitted at this node")
            emits[site] = _bound(emit, match, site)
        replaced.update(match.replaced)
    return copy_graph(graph, emits, replaced) if emits else graph


def _bound(emit: Callable[[Graph, Remap, M, int], Mapping[int, Node]], match: M, site: int) -> Emit:
    return lambda out, remap: emit(out, remap, match, site)


@dataclass(frozen=True)
class Pattern(Generic[M]):
    """A named rewrite: ``match`` finds its matches, ``emit`` builds one match's nodes at one site."""

    name: str
    match: Callable[[Graph], Sequence[M]]
    emit: Callable[[Graph, Remap, M, int], Mapping[int, Node]]

    def apply(self, graph: Graph) -> Graph:
        return rewrite(graph, self.match(graph), self.emit)


#: every registered pattern by name, in registration order (the order :func:`fuse` runs them)
PATTERNS: dict[str, Pattern] = {}


def register(pattern: Pattern[M]) -> Pattern[M]:
    """Add ``pattern`` to the registry; RegistryError if its name is taken."""
    if pattern.name in PATTERNS:
        raise RegistryError(f"pattern {pattern.name!r} is already registered "
                            f"(by {PATTERNS[pattern.name].match.__module__})")
    PATTERNS[pattern.name] = pattern
    return pattern


def fuse(graph: Graph, skip: Collection[str] = frozenset(), only: Collection[str] | None = None) -> Graph:
    """Run every registered pattern (or those in ``only``) not in ``skip``, in registration order.
    GraphError names a ``skip`` entry that is no pattern."""
    unknown = set(skip) - set(PATTERNS)
    if unknown:
        raise GraphError(f"unknown patterns {sorted(unknown)}; known: {', '.join(PATTERNS)}")
    for name, pattern in list(PATTERNS.items()):
        if name not in skip and (only is None or name in only):
            graph = pattern.apply(graph)
    return graph

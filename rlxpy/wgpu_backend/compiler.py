"""Graph -> CompiledSchedule: passes, memory plan, bind windows, lowering. No GPU calls here."""

from __future__ import annotations

from dataclasses import dataclass

from rlxpy.errors import GraphError, LimitError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.shape import format_shape
from rlxpy.wgpu_backend.arena import ArenaPlan, is_view, pinned, plan_arena, tensor_bytes
from rlxpy.wgpu_backend.memplan import align_up
from rlxpy.wgpu_backend.schedule import DeviceFacts, LowerCtx, Step, lower_node


@dataclass
class CompiledSchedule:
    graph: Graph  # the primitive graph that was lowered
    arena: ArenaPlan
    steps: list[Step]
    window_size: int

    def node_offset(self, node_id: int) -> int:
        return self.arena.offsets[node_id]


def prepare(graph: Graph) -> Graph:
    """verify -> unfuse -> verify: a static graph of primitives."""
    from rlxpy.ir.passes.unfuse import unfuse

    graph.verify()
    if not graph.is_static():
        raise GraphError(f"graph {graph.name!r} has symbolic dims {sorted(graph.symbols())}: bind them first")
    return unfuse(graph).verify()


def choose_window(span: tuple[int, int], arena_size: int, window: int, alignment: int) -> int:
    """Base of a ``window``-byte binding covering [lo, hi); ``arena_size`` and ``window`` aligned."""
    lo, hi = span
    base = min(lo // alignment * alignment, arena_size - window)
    assert base <= lo and base + window >= hi
    return base


def lower_graph(graph: Graph, facts: DeviceFacts, keep_all: bool = False) -> CompiledSchedule:
    """Plan the arena and lower every node of a prepared graph into Steps."""
    from rlxpy.wgpu_backend import lowering  # noqa: F401  (registers the lowerers)

    alignment = facts.storage_align
    arena = plan_arena(graph, alignment, keep_all=keep_all)
    size = align_up(arena.size, alignment)
    window = min(size, facts.max_binding // alignment * alignment)
    ctx = LowerCtx(graph, arena.offsets, size, facts, arena.scratch, 0, window, graph.consumers())
    steps: list[Step] = []
    for node in graph.nodes:
        if pinned(node) or is_view(node, graph):
            continue
        ctx.window_base = choose_window(_span(node, graph, arena, alignment, window), size, window, alignment)
        steps.extend(lower_node(node, ctx))
    return CompiledSchedule(graph, arena, steps, window)


def _span(node: Node, graph: Graph, arena: ArenaPlan, alignment: int, window: int) -> tuple[int, int]:
    ids = [*node.inputs, node.id]
    lo = min(arena.offsets[i] for i in ids)
    hi = max(arena.offsets[i] + tensor_bytes(graph.nodes[i]) for i in ids)
    if hi - lo // alignment * alignment > window:
        sizes = ", ".join(f"{graph.nodes[i].name} {format_shape(graph.nodes[i].shape)}" for i in ids)
        raise LimitError(f"{where(node)}: its tensors span {(hi - lo) / 2**20:.1f} MiB of the arena, more than "
                         f"one binding ({window / 2**20:.1f} MiB) can see: {sizes}")
    return lo, hi


def is_leaf(node: Node) -> bool:
    return isinstance(node.op, ops.LEAF_OPS)

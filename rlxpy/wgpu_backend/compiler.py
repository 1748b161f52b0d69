"""Graph -> CompiledSchedule: passes, memory plan, bind windows, lowering. No GPU calls here.

Bind windows (the math is in windows.py): when the arena fits one binding every step binds it
whole. Otherwise each node gets a window of W = cap bytes; a node whose tensors do not fit one
window has some staged into free bytes inside it (copy in before, copy back after), and when no
window has room the plan gets a gap (a staging region) beside the node's largest tensor and is
planned again. A staging copy whose ends fit one window is an ``elementwise_copy_words`` dispatch; a
longer one is a "copy" step that the encoder runs through a transfer buffer (copy_buffer_to_buffer refuses a
copy inside one buffer). Both carry ``Step.copy`` so the report counts staged bytes.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from rlxpy import env
from rlxpy.errors import GraphError, LimitError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.passes.rewrite import fuse
from rlxpy.ir.passes.unfuse import unfuse
from rlxpy.wgpu_backend import (
    lowering,  # noqa: F401  (importing it registers every family's lowerers)
    windows,
)
from rlxpy.wgpu_backend.arena import ArenaPlan, is_view, pinned, plan_arena, tensor_bytes
from rlxpy.wgpu_backend.lowering.elementwise import ELEMENTWISE_COPY_WORDS
from rlxpy.wgpu_backend.memplan import align_up
from rlxpy.wgpu_backend.schedule import LOWERERS, DeviceFacts, LowerCtx, Step, lower_node, scratch_needed
from rlxpy.wgpu_backend.windows import WindowPlan

MAX_GAP_ROUNDS = 64  # each round fixes every node that failed in it, so a few rounds suffice


@dataclass
class CompiledSchedule:
    graph: Graph  # the primitive graph that was lowered
    arena: ArenaPlan
    steps: list[Step]
    window_size: int
    windows: dict[int, WindowPlan] = field(default_factory=dict)  # node id -> its window (multi-window)

    def node_offset(self, node_id: int) -> int:
        return self.arena.offsets[node_id]

    @property
    def staged_bytes(self) -> int:
        return sum(s.copy[2] for s in self.steps if s.copy is not None)


def prepare(graph: Graph) -> Graph:
    """verify -> unfuse -> pattern fusion (ir/passes/rewrite.py: decode GEMVs, then transformer
    patterns; RLX_WGPU_SKIP_PATTERNS names those to skip) -> verify."""
    graph.verify()
    if not graph.is_static():
        raise GraphError(f"graph {graph.name!r} has symbolic dims {sorted(graph.symbols())}: bind them first")
    primitive = unfuse(graph)
    if env.NO_PATTERNS:
        return primitive.verify()
    skip = {name.strip() for name in str(env.SKIP_PATTERNS).split(",") if name.strip()}
    if env.NO_PACKED_BSHD_ATTN:
        skip.add("packed_attention")
    if ops.FusedGgufMatMul not in LOWERERS:
        skip.add("decode")  # no kernel for the fused GEMV
    return fuse(primitive, skip).verify()


def choose_window(span: tuple[int, int], arena_size: int, window: int, alignment: int) -> int:
    """Base of a ``window``-byte binding covering [lo, hi); ``arena_size`` and ``window`` aligned."""
    base = windows.cover_base(span[0], span[1], arena_size, window, alignment)
    assert base is not None, f"span {span} does not fit one {window}-byte window"
    return base


def lower_graph(graph: Graph, facts: DeviceFacts, keep_all: bool = False) -> CompiledSchedule:
    """Plan the arena and its bind windows, and lower every node of a prepared graph into Steps."""
    alignment = facts.storage_align
    nodes = [n for n in graph.nodes if not (pinned(n) or is_view(n, graph))]
    arena, plans, window = plan_windows(graph, nodes, plan_arena(graph, alignment, keep_all=keep_all,
                                                                     scratch=scratch_needed(graph)),
                                        facts.max_binding, alignment)
    size = align_up(arena.size, alignment)
    ctx = LowerCtx(graph, arena.offsets, size, facts, arena.scratch, 0, window, graph.consumers())
    steps: list[Step] = []
    for node in nodes:
        plan = plans.get(node.id)
        if plan is None:
            steps.extend(lower_node(node, ctx))
        elif isinstance(plan, LimitError):  # fine only for host steps, which need no window
            steps.extend(_lower_host_only(node, ctx, plan))
        else:
            steps.extend(_lower_windowed(node, ctx, plan, alignment))
    return CompiledSchedule(graph, arena, steps, window,
                            {k: v for k, v in plans.items() if isinstance(v, WindowPlan)})


def plan_windows(graph: Graph, nodes: list[Node], arena: ArenaPlan, cap: int, alignment: int
                 ) -> tuple[ArenaPlan, dict[int, WindowPlan | LimitError], int]:
    """(arena, {node id: window plan}, W). The arena gains gaps where staging found no room; an
    empty dict means one window sees the whole arena. A node no window can serve maps to its
    LimitError, raised at lowering unless the node lowers to host steps only."""
    for _ in range(MAX_GAP_ROUNDS):
        size = align_up(arena.size, alignment)
        window = windows.window_size(size, cap, alignment)
        if window >= size:
            return arena, {}, window
        live = liveness(arena, alignment)
        plans: dict[int, WindowPlan | LimitError] = {}
        requests: dict[int, int] = {}
        cuts: list[int] | None = None
        for node in nodes:
            units = windows.merge_units(accesses(node, graph, arena))
            step = node.id
            free_between = functools.partial(_free, live, step, alignment)
            try:
                try:
                    plan = windows.plan_window(units, size, window, alignment, free_between, where(node))
                except windows.NoRoom as e:
                    if cuts is None:
                        cuts = windows.cut_points(_spans(arena, alignment))
                    cut, gap = windows.gap_request(e.units, cuts, window, alignment, where(node))
                    requests[cut] = max(requests.get(cut, 0), gap)
                    continue
            except LimitError as e:
                plans[node.id] = e
                continue
            if not plan.staged:
                free = live.free(step, plan.base, plan.base + window, alignment)
                plan = dataclasses.replace(plan, scratch=windows.in_window_scratch(plan, free, arena.scratch))
            plans[node.id] = plan
        if not requests:
            return arena, plans, window
        arena = arena.with_gaps(requests)
    raise LimitError(f"bind windows: no staging layout found after {MAX_GAP_ROUNDS} rounds of gap insertion "
                     f"(arena {arena.size / 2**20:.1f} MiB, binding cap {cap / 2**20:.3f} MiB)")


def accesses(node: Node, graph: Graph, arena: ArenaPlan) -> list[windows.Access]:
    """The tensors a node's steps touch: its inputs (read), its output and the inputs it mutates
    (written: a staged KV cache is copied back after the node too)."""
    seen: dict[int, windows.Access] = {}
    for i in node.inputs:
        src = graph.nodes[i]
        seen[i] = windows.Access(i, arena.offsets[i], tensor_bytes(src), False, src.name)
    seen[node.id] = windows.Access(node.id, arena.offsets[node.id], tensor_bytes(node), True, node.name)
    mutated = sorted({node.inputs[k] for k in node.op.mutated_inputs()})
    return list(seen.values()) + [dataclasses.replace(seen[i], written=True) for i in mutated]


def _free(live: windows.Liveness, step: int, alignment: int, lo: int, hi: int) -> list[windows.Region]:
    return live.free(step, lo, hi, alignment)


def liveness(arena: ArenaPlan, alignment: int) -> windows.Liveness:
    return windows.Liveness((arena.plan.offsets[b.key], align_up(b.size, alignment), b.birth, b.death)
                            for b in arena.buffers)


def _spans(arena: ArenaPlan, alignment: int) -> list[tuple[int, int]]:
    spans = [(arena.plan.offsets[b.key], arena.plan.offsets[b.key] + align_up(b.size, alignment))
             for b in arena.buffers]
    end = arena.scratch[0]
    return spans + [(end, end)]  # the end of the placed tensors is a cut too


class _Tracked(Mapping[int, int]):
    """The offsets a lowerer looked up, so the compiler can check each lies inside the window."""

    def __init__(self, offsets: Mapping[int, int]) -> None:
        self.offsets = offsets
        self.seen: set[int] = set()

    def __getitem__(self, node_id: int) -> int:
        self.seen.add(node_id)
        return self.offsets[node_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets)


def _lower_host_only(node: Node, ctx: LowerCtx, error: LimitError) -> list[Step]:
    """A node whose tensors fit no window: acceptable when it lowers to host steps only."""
    ctx.window_base = 0
    body = lower_node(node, ctx)
    if any(s.kind != "host" for s in body):
        raise error
    return body


def _lower_windowed(node: Node, ctx: LowerCtx, plan: WindowPlan, alignment: int) -> list[Step]:
    """Lower ``node`` in its window; staged tensors are resolved to their copies for the lowerer."""
    offsets, scratch = ctx.offsets, ctx.scratch
    ctx.window_base, ctx.scratch = plan.base, plan.scratch
    tracked = _Tracked(collections.ChainMap(plan.relocations(), offsets) if plan.staged else offsets)
    ctx.offsets = tracked  # type: ignore[assignment]
    try:
        body = lower_node(node, ctx)
    finally:
        ctx.offsets, ctx.scratch = offsets, scratch
    if all(s.kind == "host" for s in body):
        return body  # host steps read and write the tensors where they live
    if plan.staged and any(s.kind == "host" for s in body):
        raise LimitError(f"{where(node)}: mixes host and GPU steps, and its tensors do not fit one "
                         f"{plan.size / 2**20:.3f} MiB binding (staging cannot serve the host steps)")
    for node_id in sorted(tracked.seen):  # a lowerer addressing a tensor outside the window would be silent
        other = ctx.graph.nodes[node_id]
        if not windows.covers(plan.base, plan.size, tracked.offsets[node_id], tensor_bytes(other)):
            raise LimitError(f"{where(node)}: its lowerer addresses {other.name}, which lies outside the "
                             f"node's {plan.size / 2**20:.3f} MiB bind window (only its inputs and output "
                             "are placed or staged in the window)")
    if not plan.staged:
        return body
    before = [_copy_step(node, ctx, s.unit.offset, s.slot, s.unit.size, "stage_in", alignment)
              for s in plan.staged if s.unit.read and s.unit.size]
    after = [_copy_step(node, ctx, s.slot, s.unit.offset, s.unit.size, "stage_out", alignment)
             for s in plan.staged if s.unit.written and s.unit.size]
    return before + body + after


def _copy_step(node: Node, ctx: LowerCtx, src: int, dst: int, nbytes: int, label: str,
               alignment: int) -> Step:
    """One staging copy: an elementwise_copy_words dispatch when a window covers both ends, else a
    "copy" step."""
    base = windows.copy_window(src, dst, nbytes, ctx.arena_size, ctx.window_size, alignment)
    shape = f"{nbytes} B"
    if base is None:
        return Step("copy", f"{label}:{node.name}", node.name, "copy_2hop", out_shape=shape,
                    copy=(src, dst, nbytes))
    words = math.ceil(nbytes / 4)
    step = ctx.dispatch(ELEMENTWISE_COPY_WORDS, node, ctx.grid_1d(words), scalable=False, n=words,
                        x=(src - base) // 4, y=(dst - base) // 4)
    return dataclasses.replace(step, label=f"{label}:{node.name}", window=(base, ctx.window_size),
                               out_shape=shape, copy=(src, dst, nbytes))


def _span(node: Node, graph: Graph, arena: ArenaPlan, alignment: int, window: int) -> tuple[int, int]:
    """[lo, hi) of a node's tensors; LimitError when they cannot share one window even with staging."""
    units = windows.merge_units(accesses(node, graph, arena))
    windows.check_fits(units, window, alignment, where(node))
    return min(u.offset for u in units), max(u.end for u in units)


def is_leaf(node: Node) -> bool:
    return isinstance(node.op, ops.LEAF_OPS)

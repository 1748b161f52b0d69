"""Half-precision (f16 / bf16) convs, pools and im2col on the f32 kernels: f16 storage, f32 arithmetic.

The conv family's kernels read and write f32 words; a 2-byte output element shares its word with a
neighbour, which another invocation may own. So a half node runs in three parts, all on the GPU:

1. its half inputs are widened into the arena's scratch (elementwise_cast_half: exact, every half is
   an f32);
2. the node's own f32 lowering runs on those copies into an f32 output, also in scratch (the same
   kernels, tiles and split-K as an f32 node; the sums accumulate in f32);
3. that output is narrowed into the node (round to nearest even, overflow to inf: torch's ``.to()``).

The reference sums in float64 and rounds once, so the two can differ by one unit in the last place of
the half result where the f32 sum lies within f32 rounding of a half tie. Where the scratch does not
lie inside the node's arena binding (a binding cap smaller than the arena), the node stays a host step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.base import TensorType
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.lowering.elementwise import cast_half_steps
from rlxpy.wgpu_backend.schedule import LowerCtx, Step

HALVES = (DType.F16, DType.BF16)


def is_half(node: Node) -> bool:
    return node.dtype in HALVES


def _words(numel: int) -> int:
    return 4 * numel  # f32 bytes (always whole words)


def half_scratch(node: Node, graph: Graph, f32_scratch: Callable[[Node, Graph], int] | None = None) -> int:
    """Scratch bytes a half node takes: f32 copies of its half inputs and of its output, then what its
    f32 lowering asks for (``f32_scratch`` of the f32 stand-in node)."""
    inputs = [graph.nodes[i] for i in node.inputs]
    copies = sum(_words(x.numel) for x in inputs if x.dtype in HALVES) + _words(node.numel)
    extra = f32_scratch(_as_f32(node, node.id, node.inputs), graph) if f32_scratch is not None else 0
    return copies + extra


def _as_f32(node: Node, node_id: int, inputs: tuple[int, ...]) -> Node:
    return Node(node_id, node.op, inputs, TensorType(node.shape, DType.F32), node.name)


def _unscaled(step: Step) -> Step:
    """The step runs in full whatever the active extent (a weight's leading dim is not the batch)."""
    return dataclasses.replace(step, scales=(), extent_axis=-1, extent_rows=0)


def half_steps(node: Node, ctx: LowerCtx, lower_f32: Callable[[Node, LowerCtx], list[Step]]) -> list[Step]:
    """Widen, run ``lower_f32`` on f32 stand-ins, narrow (see the module docstring)."""
    if node.numel == 0:
        return []
    base, size = ctx.scratch
    need = half_scratch(node, ctx.graph)
    if base < ctx.window_base or base + need > min(base + size, ctx.window_base + ctx.window_size):
        return host_steps(node, ctx)
    nodes: dict[int, Node] = dict(enumerate(ctx.graph.nodes))
    offsets = dict(ctx.offsets)
    shadow = dataclasses.replace(ctx, graph=_NodeView(nodes), offsets=offsets)  # type: ignore[arg-type]
    cursor, steps, wide_inputs = base, [], []
    for index, x in enumerate(ctx.inputs(node)):
        if x.dtype not in HALVES:
            wide_inputs.append(x.id)
            continue
        wide_id = -1 - index  # ids no graph node has
        wide_type = TensorType(x.shape, DType.F32)
        nodes[wide_id] = Node(wide_id, ops.Cast(DType.F32), (x.id,), wide_type, node.name)
        offsets[wide_id] = cursor
        cursor += _words(x.numel)
        steps += cast_half_steps(nodes[wide_id], shadow)
        wide_inputs.append(wide_id)
    out_id = -1 - len(node.inputs)
    nodes[out_id] = _as_f32(node, out_id, tuple(wide_inputs))
    offsets[out_id] = cursor
    cursor += _words(node.numel)
    inner = dataclasses.replace(shadow, scratch=(cursor, base + size - cursor))
    steps += lower_f32(nodes[out_id], inner)
    narrow = Node(node.id, ops.Cast(node.dtype), (out_id,), node.type, node.name)
    steps += cast_half_steps(narrow, shadow)
    return [_unscaled(s) if s.kernel == "elementwise_cast_half" else s for s in steps]


class _NodeView:
    """The graph's nodes plus the stand-ins, by id (LowerCtx only indexes ``graph.nodes``)."""

    def __init__(self, nodes: dict[int, Node]) -> None:
        self.nodes = nodes

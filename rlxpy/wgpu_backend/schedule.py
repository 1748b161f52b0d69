"""Steps, the lowering context, and the lowerer registry.

A Step is data: the run loop encodes it without asking which op it came from. Lowerers are
pure functions ``(node, ctx) -> list[Step]``; they make no GPU calls and read no env, so tests
can assert on Steps without a device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlxpy.errors import LimitError, RegistryError, UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.shape import format_shape
from rlxpy.wgpu_backend.kernels.params import Kernel

MAX_GROUPS = 65535


@dataclass(frozen=True)
class Step:
    """One unit of the schedule. kind: "gpu" (dispatch), "copy" (arena copy), "host" (CPU)."""

    kind: str
    label: str  # "<kernel>:<node>"
    node: str
    kernel: str = ""
    source: str = ""  # specialised WGSL (gpu steps)
    uniforms: bytes = b""
    grid: tuple[int, int, int] = (1, 1, 1)
    window: tuple[int, int] = (0, 0)  # (base byte offset, size) of the arena binding
    out_shape: str = ""
    host: Callable[[Any], None] | None = None
    scales: tuple[str, ...] = ()  # uniform fields that grow with the active extent
    extent_axis: int = -1  # grid axis that shrinks with the active extent (-1: keep the grid)
    extent_rows: int = 0  # leading dim of the step's node: the extent it can scale, 0 = none
    copy: tuple[int, int, int] | None = None  # (src byte offset, dst byte offset, bytes)

    @property
    def workgroups(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


LowerFn = Callable[[Node, "LowerCtx"], list[Step]]
LOWERERS: dict[type[ops.Op], LowerFn] = {}
NOT_LOWERED: dict[type[ops.Op], str] = {}


def lowers(*op_types: type[ops.Op]) -> Callable[[LowerFn], LowerFn]:
    """Register a lowerer; a second registration names both places."""

    def register(fn: LowerFn) -> LowerFn:
        for op_type in op_types:
            if op_type in LOWERERS:
                raise RegistryError(f"{op_type.__name__} already lowered in {LOWERERS[op_type].__module__}")
            LOWERERS[op_type] = fn
        return fn

    return register


def not_lowered(op_type: type[ops.Op], reason: str) -> None:
    NOT_LOWERED[op_type] = reason


@dataclass
class DeviceFacts:
    """What lowering may know about the device: plain numbers, so it stays pure."""

    max_binding: int = 128 << 20
    storage_align: int = 256
    max_workgroup_storage: int = 16384
    max_invocations: int = 256
    features: frozenset[str] = frozenset()
    #: a CPU adapter (lavapipe, llvmpipe): kernels with a CPU variant use it (RLX_WGPU_KERNELS overrides)
    cpu: bool = False


@dataclass
class LowerCtx:
    graph: Graph
    offsets: dict[int, int]  # node id -> byte offset in the arena (views resolved)
    arena_size: int
    facts: DeviceFacts
    scratch: tuple[int, int] = (0, 0)  # (byte offset, size)
    window_base: int = 0
    window_size: int = 0
    consumers: dict[int, list[int]] = field(default_factory=dict)

    # -- addressing ---------------------------------------------------------------------------
    def byte_offset(self, ref: Node | int) -> int:
        node_id = ref.id if isinstance(ref, Node) else ref
        return self.offsets[node_id]

    def offset(self, ref: Node | int, unit: int = 4) -> int:
        """Offset of a tensor relative to the current window, in ``unit``-byte elements."""
        rel = self.byte_offset(ref) - self.window_base
        assert rel >= 0 and rel % unit == 0, f"offset {rel} of node {ref} not in window / unaligned"
        return rel // unit

    def node(self, ref: Node | int) -> Node:
        return self.graph.nodes[ref.id if isinstance(ref, Node) else ref]

    def inputs(self, node: Node) -> list[Node]:
        return [self.graph.nodes[i] for i in node.inputs]

    # -- steps --------------------------------------------------------------------------------
    def dispatch(
        self,
        kernel: Kernel,
        node: Node,
        grid: tuple[int, int, int],
        subs: dict[str, object] | None = None,
        scalable: bool = True,
        **fields: float | int,
    ) -> Step:
        """A GPU step. ``scalable=False`` opts it out of the active extent (it then runs in full)."""
        if any(g > MAX_GROUPS for g in grid):
            raise LimitError(f"{where(node)}: grid {grid} exceeds {MAX_GROUPS} workgroups per dimension")
        return Step(
            "gpu",
            f"{kernel.name}:{node.name}",
            node.name,
            kernel.name,
            kernel.source(**(subs or {})),
            kernel.params.pack(fields),
            grid,
            (self.window_base, self.window_size),
            format_shape(node.shape),
            scales=kernel.params.scales if scalable else (),
            extent_axis=kernel.extent_axis,
            extent_rows=int(node.shape[0]) if node.rank and scalable else 0,
        )

    def host(self, node: Node, name: str, fn: Callable[[Any], None]) -> Step:
        return Step(
            "host", f"{name}:{node.name}", node.name, name, out_shape=format_shape(node.shape), host=fn
        )

    @staticmethod
    def grid_1d(threads: int, workgroup: int = 256) -> tuple[int, int, int]:
        """Groups for ``threads`` lanes; past 65535 groups the grid folds into y."""
        groups = max(1, math.ceil(threads / workgroup))
        if groups <= MAX_GROUPS:
            return (groups, 1, 1)
        return (MAX_GROUPS, math.ceil(groups / MAX_GROUPS), 1)

    @staticmethod
    def grid_rows(rows: int) -> tuple[int, int, int]:
        """One workgroup per row."""
        return LowerCtx.grid_1d(rows, 1)


def lower_node(node: Node, ctx: LowerCtx) -> list[Step]:
    fn = LOWERERS.get(type(node.op))
    if fn is None:
        reason = NOT_LOWERED.get(type(node.op), "no WebGPU lowering exists for this op yet")
        shapes = ", ".join(format_shape(ctx.node(i).shape) for i in node.inputs)
        raise UnsupportedOpError(f"{where(node)}: {reason} (inputs {shapes or 'none'})")
    return fn(node, ctx)


def touched(node: Node) -> Sequence[int]:
    return (*node.inputs, node.id)

"""Steps, the lowering context, and the lowerer registry.

A Step is data: the run loop encodes it without asking which op it came from. Lowerers are
pure functions ``(node, ctx) -> list[Step]``; they make no GPU calls and read no env, so tests
can assert on Steps without a device.

Kernel contracts (kernels/contract.py) are enforced here, once: ``LowerCtx.dispatch`` refuses a
step whose node the kernel does not take (dtypes) or whose variant exceeds the device (workgroup
invocations and memory, grid), and ``lower_node`` checks that every input the op mutates is
written by a step. A lowerer that needs scratch space says how much with ``@lowers(..., scratch=)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlxpy.errors import LimitError, RegistryError, UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.shape import format_shape
from rlxpy.wgpu_backend.kernels.contract import dtype_names
from rlxpy.wgpu_backend.kernels.params import KERNELS, Kernel

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
    checked: bool = True  # compiled with WGSL's runtime checks (Kernel.checked)

    @property
    def workgroups(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


LowerFn = Callable[[Node, "LowerCtx"], list[Step]]
ScratchFn = Callable[[Node, Graph], int]
LOWERERS: dict[type[ops.Op], LowerFn] = {}
NOT_LOWERED: dict[type[ops.Op], str] = {}
#: op -> bytes of arena scratch its lowerer wants for a node (split-K partials); ``ctx.scratch`` offers them.
SCRATCH: dict[type[ops.Op], ScratchFn] = {}


def lowers(*op_types: type[ops.Op], scratch: ScratchFn | None = None) -> Callable[[LowerFn], LowerFn]:
    """Register a lowerer; a second registration names both places. ``scratch(node, graph)``: the
    scratch bytes the lowerer would use for ``node`` (the compiler sizes the arena's scratch as the
    largest; the lowerer uses what ``ctx.scratch`` offers)."""

    def register(fn: LowerFn) -> LowerFn:
        for op_type in op_types:
            if op_type in LOWERERS:
                raise RegistryError(f"{op_type.__name__} already lowered in {LOWERERS[op_type].__module__}")
            LOWERERS[op_type] = fn
            if scratch is not None:
                SCRATCH[op_type] = scratch
        return fn

    return register


def scratch_needed(graph: Graph) -> int:
    """The largest scratch any node's lowerer asks for (``@lowers(..., scratch=)``)."""
    return max((SCRATCH[type(n.op)](n, graph) for n in graph.nodes if type(n.op) in SCRATCH), default=0)


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
    #: the adapter is a CPU one whatever RLX_WGPU_KERNELS picks: llvmpipe silently stops an invocation
    #: after 65535 loop iterations (lowering/reduce.py), so kernels whose walk grows past it avoid it there
    loop_limited: bool = False


def exceeds(kernel: Kernel, facts: DeviceFacts, subs: Mapping[str, object] | None = None) -> str:
    """Why the variant of ``kernel`` made with ``subs`` does not fit the device ("" when it fits)."""
    size, shared = kernel.launch(subs)
    invocations = math.prod(size)
    if invocations > facts.max_invocations:
        return (f"{kernel.name} needs {invocations} invocations per workgroup {size}, the device "
                f"allows {facts.max_invocations}")
    if shared > facts.max_workgroup_storage:
        return (f"{kernel.name} needs {shared} B of workgroup memory, the device allows "
                f"{facts.max_workgroup_storage} B")
    return ""


def fits(kernel: Kernel, facts: DeviceFacts, subs: Mapping[str, object] | None = None) -> bool:
    """Does the variant of ``kernel`` made with ``subs`` fit the device? (for a lowerer choosing one)"""
    return not exceeds(kernel, facts, subs)


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
        operands: Sequence[Node] | None = None,
        **fields: float | int,
    ) -> Step:
        """A GPU step of ``kernel`` for ``node``, its contract checked (``check``). ``scalable=False``
        opts it out of the active extent (it then runs in full). ``operands``: the tensors the kernel
        reads, by the positions of its contract, when they are not the node's inputs."""
        self.check(kernel, node, subs, operands)
        if any(g > MAX_GROUPS for g in grid):
            raise LimitError(f"{where(node)}: grid {grid} exceeds {MAX_GROUPS} workgroups per dimension "
                             f"({self.signature(node)})")
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
            checked=kernel.checked,
        )

    # -- kernel contracts -----------------------------------------------------------------------
    def check(self, kernel: Kernel, node: Node, subs: Mapping[str, object] | None = None,
              operands: Sequence[Node] | None = None) -> None:
        """Refuse a step of ``kernel`` for ``node``: UnsupportedOpError for a dtype the kernel does not
        take, LimitError for a variant (``subs``) past the device's workgroup limits."""
        inputs = self.inputs(node)
        input_roles = getattr(node.op, "input_roles", None)
        roles = dict(zip(input_roles(), inputs)) if input_roles is not None else {}
        bad = kernel.dtypes.refusal(inputs if operands is None else operands, node, roles)
        if bad is not None:
            what, t, allowed = bad
            raise UnsupportedOpError(f"{where(node)}: {kernel.name} is lowered for {dtype_names(allowed)} "
                                     f"only, {what} {t.name} is {t.type} ({self.signature(node)})")
        refusal = exceeds(kernel, self.facts, subs)
        if refusal:
            raise LimitError(f"{where(node)}: {refusal} ({self.signature(node)})")

    def signature(self, node: Node) -> str:
        """``inputs f32[2, 3], i32[1] -> f32[2, 3]``: the types a contract error shows."""
        types = ", ".join(str(self.node(i).type) for i in node.inputs)
        return f"inputs {types or 'none'} -> {node.type}"

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
    steps = fn(node, ctx)
    check_mutations(node, ctx, steps)
    return steps


def check_mutations(node: Node, ctx: LowerCtx, steps: Sequence[Step]) -> None:
    """Every input the op mutates (``Op.mutated_inputs``) must be written by one of its GPU steps
    through a field its kernel declares (``kernel(..., mutates=)``); host steps write them back
    themselves (host_step.py)."""
    gpu = [s for s in steps if s.kind == "gpu"]
    mutated = node.op.mutated_inputs()
    if not gpu or not mutated:
        return
    written = set()
    for step in gpu:
        kernel = KERNELS[step.kernel]
        if kernel.mutates:
            values = kernel.params.unpack(step.uniforms)
            written |= {values[f] for f in kernel.mutates}
    for index in mutated:
        target = ctx.node(node.inputs[index])
        if ctx.offset(target) not in written:
            kernels = sorted({s.kernel for s in gpu})
            raise RegistryError(f"{where(node)}: the op mutates input {index} ({target.name}), but no step "
                                f"of kernels {kernels} declares a field writing it (kernel(..., mutates=))")


def touched(node: Node) -> Sequence[int]:
    return (*node.inputs, node.id)

"""The arena: where every tensor of a compiled graph lives, and the GPU buffer holding it.

``plan_arena`` decides offsets (views alias their root, everything else is placed by
memplan.place with liveness); ``Arena`` owns the wgpu buffer and moves bytes in and out.
Storage is dtype-aware: a tensor takes numel * itemsize bytes (bool as u32, see ir/dtype.py).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlxpy.errors import LimitError
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.device import wgpu_module
from rlxpy.wgpu_backend.memplan import Buffer, Plan, align_up, place
from rlxpy.wgpu_backend.windows import shift

SCRATCH_MIN = 1 << 16
SYNC_SLOT = 2  # the readback slot of Arena.read (never one a pre-encoded run may be writing)


def is_view(node: Node, graph: Graph) -> bool:
    """Nodes that alias bytes of their input and need no step: reshapes, dtype-preserving casts,
    and narrows that select one contiguous, word-aligned run (e.g. q/k/v of a 1-row QKV GEMV)."""
    if isinstance(node.op, ops.Reshape):
        return True
    if isinstance(node.op, ops.Cast):
        return graph.nodes[node.inputs[0]].dtype == node.dtype
    return narrow_view_offset(node, graph) is not None


def narrow_view_offset(node: Node, graph: Graph) -> int | None:
    """Byte offset of a contiguous narrow inside its input, or None when it needs a copy."""
    if not isinstance(node.op, ops.Narrow):
        return None
    x = graph.nodes[node.inputs[0]]
    axis = node.op.axis % x.rank
    if any(d != 1 for d in x.shape[:axis]) or not all(isinstance(d, int) for d in x.shape):
        return None
    inner = 1
    for d in x.shape[axis + 1 :]:
        inner *= d
    offset = node.op.start * inner * x.dtype.itemsize
    return offset if offset % 4 == 0 else None


def view_offset(node: Node, graph: Graph) -> int:
    return narrow_view_offset(node, graph) or 0


def aliases_input(node: Node, graph: Graph) -> bool:
    """Nodes whose output shares its first input's bytes: views, and in-place ops (CacheWrite)."""
    return is_view(node, graph) or isinstance(node.op, ops.CacheWrite)


def pinned(node: Node) -> bool:
    return isinstance(node.op, (ops.Input, ops.Param, ops.Constant))


def tensor_bytes(node: Node) -> int:
    return align_up(node.numel * node.dtype.itemsize, 4)


@dataclass(frozen=True)
class ArenaPlan:
    offsets: dict[int, int]  # every node, views resolved to root offset
    roots: dict[int, int]  # node id -> id of the node that owns its bytes
    plan: Plan
    scratch: tuple[int, int]  # (byte offset, size)
    buffers: tuple[Buffer, ...] = ()  # the planned buffers with their lifetimes (key = root node id)
    gaps: tuple[tuple[int, int], ...] = ()  # (offset, size) of staging regions inserted by windows.py

    @property
    def size(self) -> int:
        return self.scratch[0] + self.scratch[1]

    def with_gaps(self, gaps: dict[int, int]) -> ArenaPlan:
        """The same plan with empty regions of ``gaps`` {cut offset: bytes} inserted at cut points
        (offsets no buffer straddles): everything at or past a cut moves up by its gap."""
        order = sorted(gaps.items())
        moved = {key: shift(offset, order) for key, offset in self.plan.offsets.items()}
        plan = Plan(moved, shift(self.plan.size, order), self.plan.total_requested, self.plan.alignment)
        placed = tuple((shift(offset, order), size) for offset, size in self.gaps)
        placed += tuple((shift(cut, order) - size, size) for cut, size in order)
        offsets = {node: shift(offset, order) for node, offset in self.offsets.items()}
        scratch = (shift(self.scratch[0], order), self.scratch[1])
        return ArenaPlan(offsets, self.roots, plan, scratch, self.buffers, tuple(sorted(placed)))


def plan_arena(graph: Graph, alignment: int = 256, keep_all: bool = False, scratch: int = 0) -> ArenaPlan:
    """Place every non-view node. ``keep_all`` keeps every tensor alive (debug traces)."""
    roots: dict[int, int] = {}
    for node in graph.nodes:
        roots[node.id] = roots[node.inputs[0]] if aliases_input(node, graph) else node.id
    last = len(graph.nodes)
    death = {node.id: node.id for node in graph.nodes}
    for node in graph.nodes:
        for i in node.inputs:
            death[roots[i]] = max(death[roots[i]], node.id)
    for out in graph.outputs:
        death[roots[out]] = last
    buffers = []
    for node in graph.nodes:
        if roots[node.id] != node.id:
            continue
        if pinned(node) or keep_all:
            buffers.append(Buffer(node.id, tensor_bytes(node), 0, last))
        else:
            buffers.append(Buffer(node.id, tensor_bytes(node), node.id, death[node.id]))
    plan = place(buffers, alignment)
    offsets: dict[int, int] = {}
    for node in graph.nodes:
        if roots[node.id] == node.id:
            offsets[node.id] = plan.offsets[node.id]
        else:  # a view or in-place op: its input's bytes, plus the view's own offset
            offsets[node.id] = offsets[node.inputs[0]] + (
                view_offset(node, graph) if is_view(node, graph) else 0
            )
    scratch_size = align_up(max(scratch, SCRATCH_MIN), alignment)
    return ArenaPlan(offsets, roots, plan, (align_up(plan.size, alignment), scratch_size), tuple(buffers))


def _free(buffers: list[Any]) -> None:
    """Destroy an arena's buffers (its ``_owned`` list, as it is at the time)."""
    for buffer in buffers:
        if buffer is not None:
            buffer.destroy()


class Arena:
    """The one storage buffer (plus pooled readback staging).

    Its buffers are destroyed when the arena is (``destroy()``, or when the last reference goes):
    wgpu-native keeps a buffer alive while a finished command buffer that never reached a queue
    refers to it, and every executable keeps its next run encoded ahead (encode.py), so releasing
    the buffer alone would leak the whole arena. ``destroy`` frees the memory once the submitted
    work that uses it is done."""

    def __init__(self, device: Any, size: int, label: str = "rlx_arena") -> None:
        wgpu = wgpu_module()
        if size > device.max_buffer:
            raise LimitError(
                f"arena of {size} B ({size / 2**20:.1f} MiB) exceeds the device's max buffer size of "
                f"{device.max_buffer} B ({device.max_buffer / 2**20:.1f} MiB, max_buffer_size of "
                f"{device.name}): the graph's live tensors do not fit one buffer; split the graph or shrink "
                "its batch"
            )
        self.device = device
        self.size = size
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        try:
            self.buffer = device.device.create_buffer(label=label, size=size, usage=usage)
        except Exception as e:  # out of device memory, or a lost device
            if device.probe() is not None:
                raise device.lost_error(f"{label} of {size} B") from e
            raise LimitError(f"arena of {size} B ({size / 2**20:.1f} MiB) could not be allocated on "
                             f"{device.name}: {' '.join(str(e).split())}") from e
        self._stagings: list[Any] = [None, None, None]  # two for runs' readback, one for read()
        self._transfer: Any = None
        self._owned: list[Any] = [self.buffer]  # destroyed with the arena (staging, transfer: added)
        self._finalizer = weakref.finalize(self, _free, self._owned)
        self._finalizer.atexit = False  # the process's end frees them anyway
        self._pending_upload = 0

    def write(self, offset: int, data: bytes | np.ndarray) -> None:
        raw = (
            data if isinstance(data, (bytes, bytearray, memoryview)) else np.ascontiguousarray(data).tobytes()
        )
        if not len(raw):  # wgpu refuses empty writes; an empty tensor has nothing to write
            return
        if len(raw) % 4:
            raw = bytes(raw) + b"\0" * (4 - len(raw) % 4)
        assert offset % 4 == 0 and offset + len(raw) <= self.size, (offset, len(raw), self.size)
        self.device.queue.write_buffer(self.buffer, offset, raw)
        # wgpu-py's write_buffer staging memory is only released at a submit
        self._pending_upload += len(raw)
        if self._pending_upload > 256 << 20:
            self.device.queue.submit([])
            self._pending_upload = 0

    def gpu_copies(self, encoder: Any, copies: list[tuple[int, int, int]] | tuple) -> None:
        """Arena-to-arena copies through a transfer buffer (wgpu refuses a copy within one buffer)."""
        wgpu = wgpu_module()
        total = sum(align_up(n, 4) for _, _, n in copies)
        if self._transfer is None or self._transfer.size < total:
            # no destroy(): copies already recorded in this encoder may still use the old buffer;
            # dropping our reference lets wgpu free it once those commands are done
            self._transfer = self.own(self.device.device.create_buffer(
                label="rlx_transfer",
                size=max(align_up(total, 256), 256),
                usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST,
            ), replaces=self._transfer)
        cursor = 0
        for src, _, n in copies:
            encoder.copy_buffer_to_buffer(self.buffer, src, self._transfer, cursor, align_up(n, 4))
            cursor += align_up(n, 4)
        cursor = 0
        for _, dst, n in copies:
            encoder.copy_buffer_to_buffer(self._transfer, cursor, self.buffer, dst, align_up(n, 4))
            cursor += align_up(n, 4)

    def staging(self, size: int, slot: int = 0) -> Any:
        """A MAP_READ buffer of at least ``size`` bytes, reused across runs. Two slots let one
        run's readback be mapped while the next run's copies into the other are recorded."""
        wgpu = wgpu_module()
        if self._stagings[slot] is None or self._stagings[slot].size < size:
            # no destroy(): a pre-encoded run may still copy into the old buffer; dropping our
            # reference frees it once no command buffer holds it
            self._stagings[slot] = self.own(self.device.device.create_buffer(
                label=f"rlx_readback{slot}",
                size=max(align_up(size, 256), 4096),
                usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST,
            ), replaces=self._stagings[slot])
        return self._stagings[slot]

    def read(self, offset: int, size: int) -> bytes:
        """Synchronous read of arena bytes (host steps, debugging)."""
        size4 = align_up(size, 4)
        staging = self.staging(size4, SYNC_SLOT)
        encoder = self.device.device.create_command_encoder(label="rlx_read")
        encoder.copy_buffer_to_buffer(self.buffer, offset, staging, 0, size4)
        self.device.queue.submit([encoder.finish()])
        return self.map_staging(size4, SYNC_SLOT)[:size]

    def map_staging(self, size: int, slot: int = 0, staging: Any = None, submission: int | None = None
                    ) -> bytes:
        """Map and copy out ``size`` bytes of a readback buffer: ``staging`` when given (the one a
        command buffer recorded into: a slot's buffer may have been replaced by a larger one since),
        else the slot's current buffer. ``submission``: the index of the submit that filled it
        (readback.map_read waits for that submission only)."""
        from rlxpy.wgpu_backend.readback import map_read  # wgpu-native's C calls: device side only

        staging = staging if staging is not None else self._stagings[slot]
        return map_read(self.device.device, staging, size, align_up(size, 8), submission)

    def own(self, buffer: Any, replaces: Any = None) -> Any:
        """``buffer``, to be destroyed with the arena (the executable's other buffers). A buffer it
        ``replaces`` (a smaller one) is left to wgpu: not destroyed, since commands already recorded
        may still use it, and not kept, so that growing buffers do not pile up."""
        if replaces is not None and replaces in self._owned:
            self._owned.remove(replaces)
        self._owned.append(buffer)
        return buffer

    def destroy(self) -> None:
        self._finalizer()

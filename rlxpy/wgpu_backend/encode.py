"""The run loop: turn Steps into GPU work once, then encode and submit them on every run.

At build time every GPU step becomes a pre-resolved (pipeline, dynamic offsets, grid) entry;
uniform records are written once into one uniform buffer (one record per step at an aligned
stride), so per run only the dispatches are encoded (command buffers are single-use). The
output readback copies go into the last encoder, so a run is one submit plus one map unless
host steps split it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import wgpu
from wgpu.backends.wgpu_native._ffi import ffi, lib  # the raw path: three C calls per dispatch

from rlxpy.errors import InputError
from rlxpy.wgpu_backend.arena import Arena
from rlxpy.wgpu_backend.device import Device
from rlxpy.wgpu_backend.memplan import align_up
from rlxpy.wgpu_backend.readback import submit_for_index
from rlxpy.wgpu_backend.schedule import Step


@dataclass
class Segment:
    """Consecutive GPU dispatches encoded into one pass, or one host step, or one arena copy step."""

    kind: str  # "gpu" | "host" | "copy" (a staging copy through the transfer buffer; ``host`` holds its Step)
    dispatches: list[tuple[Any, int, int]]  # (pipeline, uniform slot, step index); grids live in Encoder
    host: Step | None = None


@dataclass
class Prepared:
    """An encoded run: its command buffer and where each read lands in its staging slot."""

    commands: Any
    placed: list[tuple[int, int]]
    size: int
    slot: int
    staging: Any = None  # the readback buffer the commands copy into
    submission: int | None = None  # the index of the submit that ran the commands (set by Encoder.submit)

    def read(self, arena: Arena) -> list[bytes]:
        if not self.size:
            return [b"" for _ in self.placed]
        data = arena.map_staging(self.size, self.slot, self.staging, self.submission)
        return [data[dst : dst + size] for dst, size in self.placed]


#: at most this many readback buffers per pre-encoded run key: how many runs of one key a caller may
#: have submitted and not yet read (Generator's decode pipeline depth is below it). A key gets only as
#: many as its caller keeps unread at once: two for a caller that reads each run before the next.
STAGING_RING = 8


class Encoder:
    def __init__(
        self, device: Device, arena: Arena, steps: Sequence[Step], window_size: int, raw: bool = True
    ) -> None:
        self.device = device
        self.arena = arena
        self.steps = list(steps)
        self.raw = raw
        gpu_steps = [s for s in steps if s.kind == "gpu"]
        record = align_up(max((len(s.uniforms) for s in gpu_steps), default=16), 16)
        self.record_size = record
        self.stride = align_up(record, device.uniform_align)
        self.uniform_buffer = arena.own(device.device.create_buffer(
            label="rlx_uniforms",
            size=max(self.stride * max(len(gpu_steps), 1), 256),
            usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST,
        ))
        layout = device.bind_group_layout(record)
        # one bind group serves every step (dynamic offsets): its label names the step range
        span = f"{steps[0].label}..{steps[-1].label}" if steps else "no steps"
        self.bind_group = device.device.create_bind_group(
            label=f"rlx_bind:{span} (arena window {window_size} B)",
            layout=layout,
            entries=[
                {"binding": 0, "resource": {"buffer": arena.buffer, "offset": 0, "size": window_size}},
                {"binding": 1, "resource": {"buffer": self.uniform_buffer, "offset": 0, "size": record}},
            ],
        )
        self.segments: list[Segment] = []
        self.grids: list[tuple[int, int, int]] = [s.grid for s in steps]  # the active extent edits these
        self.slot_of: dict[int, int] = {}
        self._entries: dict[int, list] = {}
        self._prepared: dict[tuple, Prepared] = {}
        self._slot = 0
        # pre-encoded runs read back into buffers of their own key (up to STAGING_RING, then the
        # set of slots whose runs are submitted and unread): a pipelined caller has runs in flight,
        # unread, when it submits the next ones
        self._key_stagings: dict[tuple, list[Any]] = {}
        self._subsets: dict[frozenset[int], list[Segment]] = {}
        offsets: list[int] = []
        blob = bytearray(self.stride * max(len(gpu_steps), 1))
        for index, step in enumerate(steps):
            if step.kind in ("host", "copy"):
                self.segments.append(Segment(step.kind, [], step))
                continue
            slot = len(offsets) // 2
            blob[slot * self.stride : slot * self.stride + len(step.uniforms)] = step.uniforms
            offsets += [step.window[0], slot * self.stride]
            # "kernel:node" of the first step that compiles it (a pipeline is shared by identical WGSL)
            pipeline = device.pipeline(step.label, step.source, record, step.checked)
            if not self.segments or self.segments[-1].kind != "gpu":
                self.segments.append(Segment("gpu", []))
            self.slot_of[index] = slot
            self.segments[-1].dispatches.append((pipeline, slot, index))
        device.queue.write_buffer(self.uniform_buffer, 0, bytes(blob))
        self.blob = blob
        self.offsets = offsets
        self._setup_raw()
        self.host_seconds: dict[int, float] = {}

    def _setup_raw(self) -> None:
        if not self.raw:
            return
        self._lib = lib
        self._c_offsets = ffi.new("uint32_t[]", self.offsets or [0, 0])
        self._raw_bind_group = self.bind_group._internal

    def _raw_entries(self, segment: Segment) -> list[tuple[Any, Any, int, int, int]]:
        """(pipeline handle or None if unchanged, offsets pointer, x, y, z) per dispatch, resolved
        once per segment and grid state, so the hot loop is three C calls and no lookups."""
        entries = self._entries.get(id(segment))
        if entries is None:
            entries, current = [], None
            for pipeline, slot, index in segment.dispatches:
                x, y, z = self.grids[index]
                if x == 0 or y == 0 or z == 0:
                    continue
                handle = pipeline._internal if pipeline is not current else None
                current = pipeline
                entries.append((handle, self._c_offsets + 2 * slot, x, y, z))
            self._entries[id(segment)] = entries
        return entries

    def invalidate(self) -> None:
        """Forget pre-resolved dispatches and pre-encoded runs (grids changed)."""
        self._entries.clear()
        self._prepared.clear()

    def _pass_label(self, segment: Segment) -> str:
        """The pass's first and last step, so that wgpu's errors name the nodes."""
        first, last = segment.dispatches[0][2], segment.dispatches[-1][2]
        name = self.steps[first].label + (f"..{self.steps[last].label}" if last != first else "")
        return f"rlx_pass:{name}"

    def _encode_pass(self, encoder: Any, segment: Segment, timestamps: dict | None = None) -> None:
        label = self._pass_label(segment) if segment.dispatches else "rlx_pass"
        if timestamps is not None:
            cpass = encoder.begin_compute_pass(label=label, timestamp_writes=timestamps)
        else:
            cpass = encoder.begin_compute_pass(label=label)
        if self.raw and timestamps is None:  # raw entries are cached per segment: not for one-off ones
            lib, internal, bg = self._lib, cpass._internal, self._raw_bind_group
            set_pipeline = lib.wgpuComputePassEncoderSetPipeline
            set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
            dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
            for handle, offsets, x, y, z in self._raw_entries(segment):
                if handle is not None:
                    set_pipeline(internal, handle)
                set_bind_group(internal, 0, bg, 2, offsets)
                dispatch(internal, x, y, z)
        else:
            current = None
            for pipeline, slot, index in segment.dispatches:
                grid = self.grids[index]
                if 0 in grid:
                    continue
                if pipeline is not current:
                    cpass.set_pipeline(pipeline)
                    current = pipeline
                cpass.set_bind_group(0, self.bind_group, self.offsets[2 * slot : 2 * slot + 2])
                cpass.dispatch_workgroups(*grid)
        cpass.end()

    def segments_for(self, steps: frozenset[int] | None) -> list[Segment]:
        """The segments restricted to the step indices ``steps`` (None = all), cached."""
        if steps is None:
            return self.segments
        if steps not in self._subsets:
            chosen: list[Segment] = []
            for segment in self.segments:
                if segment.kind != "gpu":
                    if self.steps.index(segment.host) in steps:  # type: ignore[arg-type]
                        chosen.append(segment)
                    continue
                kept = [d for d in segment.dispatches if d[2] in steps]
                if kept:
                    if chosen and chosen[-1].kind == "gpu":
                        chosen[-1] = Segment("gpu", chosen[-1].dispatches + kept)
                    else:
                        chosen.append(Segment("gpu", kept))
            self._subsets[steps] = chosen
        return self._subsets[steps]

    def run(
        self,
        host_io: Any,
        reads: Sequence[tuple[int, int]],
        steps: frozenset[int] | None = None,
        copies: Sequence[tuple[int, int, int]] = (),
        before_submit: Any = None,
    ) -> list[bytes]:
        """Encode + submit the segments (of ``steps`` only, if given); return the bytes of ``reads``."""
        return self.submit(host_io, reads, steps, copies, before_submit)()

    def submit(
        self,
        host_io: Any,
        reads: Sequence[tuple[int, int]],
        steps: frozenset[int] | None = None,
        copies: Sequence[tuple[int, int, int]] = (),
        before_submit: Any = None,
        timer: Any = None,
    ) -> Callable[[], list[bytes]]:
        """Encode + submit; returns a function that waits for the bytes of ``reads``.

        ``copies`` (src, dst, bytes) move arena bytes on the GPU before the first pass (feeds).
        ``before_submit()`` runs just before the first submit (input uploads land before it).
        A schedule without host steps is pre-encoded: the command buffer of the next run with the
        same steps, reads and copies is recorded while the GPU works on this one (command buffers
        are single-use, but nothing in them depends on input values). Such a run returns before
        the GPU is done, so a caller may submit the next runs before reading this one (up to
        STAGING_RING runs of one key unread at once; one more is an InputError).

        ``timer`` (profile.StepTimer) gives every GPU step, staging copy and the feed copies a pass
        of its own with timestamps, and times host steps; such a run is synchronous."""
        segments = self.segments_for(steps)
        if timer is None and all(s.kind != "host" for s in segments):
            key = (steps, tuple(reads), tuple(copies))
            prepared = self._prepared.pop(key, None) or self._prepare(segments, reads, copies, key)
            if before_submit is not None:
                before_submit()
            # its readback waits for this submission only, not for a next run submitted meanwhile
            prepared.submission = submit_for_index(self.device.queue, prepared.commands)
            unread = self._key_stagings[key][-1] if key in self._key_stagings else None
            if unread is not None:
                unread.add(prepared.slot)  # the next runs leave its buffer alone until it is read
            if unread is None or len(unread) < STAGING_RING:  # else prepared at the next submit
                self._prepared[key] = self._prepare(segments, reads, copies, key)  # overlaps the GPU's work
            return functools.partial(self._read, prepared, unread)
        result = self._run_with_host_steps(host_io, reads, segments, copies, before_submit, timer)
        return lambda: result

    def _run_with_host_steps(self, host_io: Any, reads: Sequence[tuple[int, int]], segments: list[Segment],
                             copies: Sequence[tuple[int, int, int]], before_submit: Any,
                             timer: Any = None) -> list[bytes]:
        """Submit GPU segments, run host steps in between (each waits for the GPU), read back."""
        if before_submit is not None:
            before_submit()
        dev = self.device.device
        encoder = dev.create_command_encoder(label="rlx_run")
        if copies:
            if timer is None:
                self.arena.gpu_copies(encoder, copies)
            else:
                timer.around(encoder, None, functools.partial(self.arena.gpu_copies, encoder, copies),
                             "feed copies")
        for index, segment in enumerate(segments):
            if segment.kind == "gpu":
                if timer is None:
                    self._encode_pass(encoder, segment)
                    continue
                for dispatch in segment.dispatches:
                    if 0 not in self.grids[dispatch[2]]:
                        self._encode_pass(encoder, Segment("gpu", [dispatch]), timer.writes(dispatch[2]))
                continue
            step: Step = segment.host  # type: ignore[assignment]
            if segment.kind == "copy":  # staging copy farther than one window: two hops, no submit
                if timer is None:
                    self.arena.gpu_copies(encoder, [step.copy])
                else:
                    timer.around(encoder, self.steps.index(step),
                                 functools.partial(self.arena.gpu_copies, encoder, [step.copy]), step.label)
                continue
            dev.queue.submit([encoder.finish()])
            started = time.perf_counter()
            try:
                step.host(host_io)
            except Exception as e:  # the traceback names the step (Python 3.11+ notes)
                if hasattr(e, "add_note"):
                    e.add_note(f"in rlxpy host step {step.label}")
                raise
            self.host_seconds[index] = time.perf_counter() - started
            if timer is not None:
                timer.host(self.steps.index(step), self.host_seconds[index])
            encoder = dev.create_command_encoder(label="rlx_run")
        readback = self._readback(encoder, reads)
        if timer is not None:
            timer.resolve(encoder)
        dev.queue.submit([encoder.finish()])
        return readback.read(self.arena)

    def _read(self, prepared: Prepared, unread: set[int] | None) -> list[bytes]:
        try:
            return prepared.read(self.arena)
        finally:
            if unread is not None:
                unread.discard(prepared.slot)

    def _key_staging(self, key: tuple, size: int) -> tuple[int, Any]:
        """(slot, buffer): the first of ``key``'s readback buffers that no submitted, unread run
        uses, made or grown to ``size`` bytes. Chosen against the *submitted* runs, not the prepared
        ones: a run prepared and then dropped (``invalidate``) holds no buffer."""
        ring = self._key_stagings.setdefault(key, [None] * STAGING_RING + [set()])
        slot = next((i for i in range(STAGING_RING) if i not in ring[-1]), None)
        if slot is None:
            raise InputError(f"{STAGING_RING} runs of this executable are submitted and not read back; "
                             "read one (call what submit returned) before submitting another")
        if ring[slot] is None or ring[slot].size < size:
            ring[slot] = self.arena.own(self.device.device.create_buffer(
                label="rlx_readback", size=max(align_up(size, 256), 256),
                usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST), replaces=ring[slot])
        return slot, ring[slot]

    def _readback(self, encoder: Any, reads: Sequence[tuple[int, int]], commands: Any = None,
                  key: tuple | None = None) -> Prepared:
        """Record the output copies into a readback buffer: the run key's own (pre-encoded runs) or
        the arena's two shared slots (alternating)."""
        placed, cursor = [], 0
        for _, size in reads:
            placed.append((cursor, size))
            cursor += align_up(size, 8)
        if key is None:
            self._slot ^= 1
        slot = self._slot
        if cursor:
            if key is not None:
                slot, staging = self._key_staging(key, cursor)
            else:
                staging = self.arena.staging(cursor, slot)
            for (offset, size), (dst, _) in zip(reads, placed):
                if size:  # empty tensors have nothing to copy (wgpu refuses zero-size maps)
                    encoder.copy_buffer_to_buffer(self.arena.buffer, offset, staging, dst, align_up(size, 4))
            return Prepared(commands, placed, cursor, slot, staging)
        return Prepared(commands, placed, cursor, slot)

    def _prepare(self, segments: list[Segment], reads: Sequence[tuple[int, int]],
                 copies: Sequence[tuple[int, int, int]] = (), key: tuple | None = None) -> Prepared:
        encoder = self.device.device.create_command_encoder(label="rlx_run")
        if copies:
            self.arena.gpu_copies(encoder, copies)
        for segment in segments:
            if segment.kind == "gpu":
                self._encode_pass(encoder, segment)
            else:  # "copy": staging hops through the transfer buffer
                self.arena.gpu_copies(encoder, [segment.host.copy])  # type: ignore[union-attr]
        prepared = self._readback(encoder, reads, key=key)
        prepared.commands = encoder.finish()
        return prepared

    def write_uniforms(self, index: int, record: bytes) -> None:
        """Replace one step's uniform record (active extent); lands before the next submit."""
        start = self.slot_of[index] * self.stride
        if bytes(self.blob[start : start + len(record)]) != record:
            self.blob[start : start + len(record)] = record
            self.device.queue.write_buffer(self.uniform_buffer, start, record)

    def restore(self, blob: bytes, grids: list) -> None:
        """Every step's uniforms and grid as a snapshot taken earlier (an active extent): one upload."""
        self.invalidate()
        self.blob[:] = blob
        self.grids[:] = grids
        self.device.queue.write_buffer(self.uniform_buffer, 0, bytes(blob))

    def gpu_step_count(self) -> int:
        return sum(len(s.dispatches) for s in self.segments if s.kind == "gpu")

"""Per-step GPU time from timestamp queries (RLX_WGPU_PROFILE, RLX_WGPU_TRACE, ``exe.profile``).

A profiled run is the run itself, not a replay: every GPU step, staging copy and the feed copies
get a compute pass of their own with begin/end timestamps (the portable ``timestamp-query``
feature), host steps are timed on the host. The figures include one pass boundary per step: use
them to rank steps and layers, not to add up a run. ``Profile`` is the dispatch report of the steps
that ran plus their times (data first); ``text`` and ``trace_events`` (Chrome trace event format,
which Perfetto and chrome://tracing open) are views of it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import wgpu
from wgpu.backends.wgpu_native._ffi import lib  # the queue's timestamp period has no wrapper

from rlxpy.env import RunFlags
from rlxpy.errors import UnsupportedOpError
from rlxpy.wgpu_backend.debug import Report, build_report, layer_of  # noqa: F401  (layer_of: re-exported)

if TYPE_CHECKING:
    from rlxpy.wgpu_backend.executable import GpuHandle, WgpuExecutable

MAX_QUERIES = 4096  # per query set (WebGPU limit)


def _timestamp_period(device: Any) -> float:
    try:
        return float(lib.wgpuQueueGetTimestampPeriod(device.queue._internal)) or 1.0
    except (ImportError, AttributeError):
        return 1.0


def _need_timestamps(dev: Any) -> None:
    if "timestamp-query" not in dev.features:
        raise UnsupportedOpError(f"profiling needs the 'timestamp-query' feature, which {dev.name} lacks")


def submit_and_read_ms(dev: Any, command: Any, queries: Any, count: int) -> np.ndarray:
    """Resolve ``count`` timestamps of ``queries`` at the end of ``command``, submit it, wait, and
    return the timestamps in milliseconds."""
    resolved = dev.device.create_buffer(
        size=8 * count, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
    )
    readback = dev.device.create_buffer(
        size=8 * count, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
    )
    command.resolve_query_set(queries, 0, count, resolved, 0)
    command.copy_buffer_to_buffer(resolved, 0, readback, 0, 8 * count)
    dev.queue.submit([command.finish()])
    readback.map_sync(wgpu.MapMode.READ)
    ticks = np.frombuffer(readback.read_mapped(), dtype=np.uint64).astype(np.float64)
    readback.unmap()
    return ticks * _timestamp_period(dev) / 1e6


def step_times_ms(exe: WgpuExecutable) -> dict[int, float]:
    """GPU milliseconds of every GPU step (by step index), one pass per step, replaying the
    whole schedule on the arena as it is (benches; ``profile`` times a real run instead)."""
    dev = exe.device
    _need_timestamps(dev)
    encoder = exe.encoder
    entries = {
        index: (pipeline, slot)
        for seg in encoder.segments
        if seg.kind == "gpu"
        for pipeline, slot, index in seg.dispatches
    }
    order = sorted(i for i in entries if 0 not in encoder.grids[i])
    times: dict[int, float] = {}
    per_set = MAX_QUERIES // 2
    for start in range(0, len(order), per_set):
        chunk = order[start : start + per_set]
        count = 2 * len(chunk)
        queries = dev.device.create_query_set(type="timestamp", count=count)
        command = dev.device.create_command_encoder(label="rlx_profile")
        for k, index in enumerate(chunk):
            pipeline, slot = entries[index]
            cpass = command.begin_compute_pass(
                label=f"rlx_profile:{exe.schedule.steps[index].label}",
                timestamp_writes={
                    "query_set": queries,
                    "beginning_of_pass_write_index": 2 * k,
                    "end_of_pass_write_index": 2 * k + 1,
                }
            )
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, encoder.bind_group, encoder.offsets[2 * slot : 2 * slot + 2])
            cpass.dispatch_workgroups(*encoder.grids[index])
            cpass.end()
        ms = submit_and_read_ms(dev, command, queries, count)
        for k, index in enumerate(chunk):
            times[index] = max(0.0, ms[2 * k + 1] - ms[2 * k])
    return times


@dataclass
class Span:
    """One timed piece of a run: a step (by schedule index) or the feed copies (``step`` None)."""

    step: int | None
    kind: str  # "gpu" | "copy" | "host"
    ms: float = 0.0


class StepTimer:
    """Timestamp query pairs for a run's spans, handed to the encoder (encode.py) during the run."""

    def __init__(self, device: Any) -> None:
        _need_timestamps(device)
        self.device = device
        self.spans: list[Span] = []
        self._sets: list[Any] = []  # query sets of MAX_QUERIES each, made as the run needs them
        self._readback: Any = None

    def _pair(self, step: int | None, kind: str) -> tuple[Any, int]:
        index = len(self.spans)
        self.spans.append(Span(step, kind))
        if index * 2 // MAX_QUERIES >= len(self._sets):
            self._sets.append(self.device.device.create_query_set(type="timestamp", count=MAX_QUERIES))
        return self._sets[-1], index * 2 % MAX_QUERIES

    def writes(self, step: int) -> dict[str, Any]:
        """``timestamp_writes`` for the pass of GPU step ``step``."""
        queries, first = self._pair(step, "gpu")
        return {"query_set": queries, "beginning_of_pass_write_index": first,
                "end_of_pass_write_index": first + 1}

    def around(self, encoder: Any, step: int | None, record: Callable[[], None], label: str = "") -> None:
        """Time copies recorded by ``record()`` between two empty timestamped passes (labelled
        ``label``: the copy step's, or the feed copies')."""
        queries, first = self._pair(step, "copy")
        encoder.begin_compute_pass(label=f"rlx_copy_start:{label}",
                                   timestamp_writes={"query_set": queries,
                                                     "beginning_of_pass_write_index": first}).end()
        record()
        encoder.begin_compute_pass(label=f"rlx_copy_end:{label}",
                                   timestamp_writes={"query_set": queries,
                                                     "end_of_pass_write_index": first + 1}).end()

    def host(self, step: int, seconds: float) -> None:
        self.spans.append(Span(step, "host", seconds * 1e3))

    def resolve(self, encoder: Any) -> None:
        """Record the query resolution into the run's last encoder (its readback waits for it)."""
        if not self._sets:
            return
        size = 8 * MAX_QUERIES * len(self._sets)
        resolved = self.device.device.create_buffer(
            size=size, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        self._readback = self.device.device.create_buffer(
            size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        used = 2 * len(self.spans)  # host spans take none, so this bounds the queries written
        for k, queries in enumerate(self._sets):
            count = min(MAX_QUERIES, used - k * MAX_QUERIES)
            if count > 0:
                encoder.resolve_query_set(queries, 0, count, resolved, 8 * MAX_QUERIES * k)
        encoder.copy_buffer_to_buffer(resolved, 0, self._readback, 0, size)

    def collect(self) -> list[Span]:
        """The spans with their milliseconds (after the run was read back)."""
        if self._readback is None:
            return self.spans
        self._readback.map_sync(wgpu.MapMode.READ)
        ticks = np.frombuffer(self._readback.read_mapped(), dtype=np.uint64).astype(np.float64)
        self._readback.unmap()
        self._readback = None
        period = _timestamp_period(self.device)
        for k, span in enumerate(self.spans):
            if span.kind != "host":
                span.ms = max(0.0, ticks[2 * k + 1] - ticks[2 * k]) * period / 1e6
        return self.spans


@dataclass
class Profile(Report):
    """The dispatch report of one run's steps with ``gpu_ms`` / ``host_ms`` per row, plus its spans."""

    spans: list[Span] = field(default_factory=list)
    feed_ms: float | None = None  # the feed copies (GPU handles copied into inputs), if any

    def by_kernel(self) -> list[dict[str, Any]]:
        return _group(self.rows, lambda r: r["kernel"])

    def by_layer(self) -> list[dict[str, Any]]:
        """In layer order; steps outside any layer (embedding, head) last as ``None``."""
        groups = _group(self.rows, lambda r: r["layer"])
        return sorted(groups, key=lambda g: (g["key"] is None, g["key"] or 0))

    def text(self, level: int = 1) -> str:
        """Totals, then one aligned line per kernel and per layer; level 2 adds the report's steps."""
        kinds = {k: sum(_ms(r) for r in self.rows if r["kind"] == k) for k in ("G", "C", "H")}
        feeds = "" if self.feed_ms is None else f", feed copies {self.feed_ms:.3f} ms"
        lines = [super().text(level)] if level >= 2 else []
        lines.append(f"rlxpy profile: {len(self.rows)} steps, GPU {kinds['G']:.3f} ms, copies "
                     f"{kinds['C']:.3f} ms, host {kinds['H']:.3f} ms{feeds} (one pass per step)")
        total = sum(kinds.values()) or 1.0
        named = [("kernel", g["key"], g) for g in self.by_kernel()]
        named += [("layer", "outside layers" if g["key"] is None else f"layer {g['key']}", g)
                  for g in self.by_layer()]
        for title, key, g in named:
            lines.append(f"  by {title:<6} {key:<26.26} {g['steps']:>5} steps "
                         f"{g['ms']:>10.3f} ms {100 * g['ms'] / total:>5.1f}%")
        return "\n".join(lines)

    def trace_events(self, start_us: float = 0.0, run: int = 0) -> list[dict[str, Any]]:
        """Chrome trace events ("X" spans laid end to end in run order): GPU steps and copies on
        thread 1, host steps on thread 2. Each step's event carries its index in ``args.step``."""
        by_index = {r["index"]: r for r in self.rows}
        events, clock = [], start_us
        for span in self.spans:
            dur = span.ms * 1e3
            if span.step is None:
                name, args = "feed copies", {"run": run}
            else:
                row = by_index[span.step]
                name = f"{row['node']} · {row['kernel']}"
                args = {"run": run, "step": span.step, "kernel": row["kernel"], "node": row["node"],
                        "layer": row["layer"], "out_shape": row["out_shape"]}
            events.append({"name": name, "cat": span.kind, "ph": "X", "ts": round(clock, 3),
                           "dur": round(dur, 3), "pid": 1, "tid": 2 if span.kind == "host" else 1,
                           "args": args})
            clock += dur
        return events

    def save(self, path: str | Path) -> Path:
        """Write this run as a Chrome trace-event JSON file (open it in https://ui.perfetto.dev)."""
        return write_trace(path, self.trace_events())


def _ms(row: dict[str, Any]) -> float:
    return row.get("gpu_ms", row.get("host_ms", 0.0))


def _group(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """Rows summed by ``key``, slowest first."""
    groups: dict[Any, dict[str, Any]] = {}
    for row in rows:
        g = groups.setdefault(key(row), {"key": key(row), "steps": 0, "ms": 0.0})
        g["steps"] += 1
        g["ms"] += _ms(row)
    return sorted(groups.values(), key=lambda g: -g["ms"])


def write_trace(path: str | Path, events: list[dict[str, Any]]) -> Path:
    path = Path(path)
    path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
    return path


def build_profile(exe: WgpuExecutable, spans: list[Span]) -> Profile:
    """The report rows of the steps that ran, in run order, with their times."""
    report = build_report(exe)
    rows = []
    for span in spans:
        if span.step is None:
            continue
        row = dict(report.rows[span.step], layer=layer_of(report.rows[span.step]["node"]))
        row["host_ms" if span.kind == "host" else "gpu_ms"] = span.ms
        rows.append(row)
    feeds = [s.ms for s in spans if s.step is None]
    summary = dict(report.summary, gpu_ms_total=sum(r.get("gpu_ms", 0.0) for r in rows))
    return Profile(summary, rows, spans, feeds[0] if feeds else None)


def profile(exe: WgpuExecutable, inputs: Mapping[str, Any] | None = None, outputs: Any = None,
            feeds: Mapping[str, GpuHandle] | None = None) -> Profile:
    """Run once with every step timed (the same arguments as ``exe.run``)."""
    return exe.timed_run(inputs, outputs, feeds)[1]


class TraceFile:
    """RLX_WGPU_TRACE: every profiled run of the process, one after the other, in one file
    (rewritten after each run so an interrupted generation still leaves a valid trace)."""

    def __init__(self) -> None:
        self.path = ""
        self.events: list[dict[str, Any]] = []
        self.runs = 0

    def add(self, prof: Profile, path: str) -> None:
        if path != self.path:  # a new file starts a new trace
            self.path, self.events, self.runs = path, [], 0
        end = max((e["ts"] + e["dur"] for e in self.events), default=0.0)
        self.events += prof.trace_events(end, self.runs)
        self.runs += 1
        write_trace(path, self.events)


TRACE_FILE = TraceFile()


def explain_profile(prof: Profile, flags: RunFlags) -> None:
    """What RLX_WGPU_PROFILE / RLX_WGPU_TRACE do after each run (as the executable's flags have them)."""
    if flags.profile:
        print(prof.text(int(flags.profile)), file=sys.stderr)
    if flags.trace:
        TRACE_FILE.add(prof, str(flags.trace))

"""Per-step GPU time from timestamp queries (RLX_WGPU_PROFILE, ``exe.profile(inputs)``).

Each GPU step runs in its own compute pass with begin/end timestamps (the portable
``timestamp-query`` feature), so the figures include one pass boundary per step: use them to
rank steps, not to add up a run. Host steps are timed by the run loop itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlxpy.errors import UnsupportedOpError

if TYPE_CHECKING:
    from rlxpy.wgpu_backend.debug import Report
    from rlxpy.wgpu_backend.executable import WgpuExecutable

MAX_QUERIES = 4096  # per query set (WebGPU limit)


def _timestamp_period(device: Any) -> float:
    try:
        from wgpu.backends.wgpu_native._ffi import lib

        return float(lib.wgpuQueueGetTimestampPeriod(device.queue._internal)) or 1.0
    except (ImportError, AttributeError):
        return 1.0


def step_times_ms(exe: WgpuExecutable) -> dict[int, float]:
    """GPU milliseconds of every GPU step (by step index), one pass per step."""
    import wgpu

    dev = exe.device
    if "timestamp-query" not in dev.features:
        raise UnsupportedOpError(f"profiling needs the 'timestamp-query' feature, which {dev.name} lacks")
    encoder = exe.encoder
    entries = {
        index: (pipeline, slot)
        for seg in encoder.segments
        if seg.kind == "gpu"
        for pipeline, slot, index in seg.dispatches
    }
    order = sorted(i for i in entries if 0 not in encoder.grids[i])
    period = _timestamp_period(dev)
    times: dict[int, float] = {}
    per_set = MAX_QUERIES // 2
    for start in range(0, len(order), per_set):
        chunk = order[start : start + per_set]
        count = 2 * len(chunk)
        queries = dev.device.create_query_set(type="timestamp", count=count)
        resolved = dev.device.create_buffer(
            size=8 * count, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
        )
        readback = dev.device.create_buffer(
            size=8 * count, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
        )
        command = dev.device.create_command_encoder(label="rlx_profile")
        for k, index in enumerate(chunk):
            pipeline, slot = entries[index]
            cpass = command.begin_compute_pass(
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
        command.resolve_query_set(queries, 0, count, resolved, 0)
        command.copy_buffer_to_buffer(resolved, 0, readback, 0, 8 * count)
        dev.queue.submit([command.finish()])
        readback.map_sync(wgpu.MapMode.READ)
        ticks = np.frombuffer(readback.read_mapped(), dtype=np.uint64).astype(np.float64)
        readback.unmap()
        for k, index in enumerate(chunk):
            times[index] = max(0.0, ticks[2 * k + 1] - ticks[2 * k]) * period / 1e6
    return times


def profile(exe: WgpuExecutable, inputs: Mapping[str, Any] | None = None) -> Report:
    """Run once (inputs in place, host steps timed), then time every GPU step; the report's rows
    gain ``gpu_ms`` (GPU steps) or ``host_ms`` (host steps)."""
    from rlxpy.wgpu_backend.debug import build_report

    exe.run(inputs or {})
    times = step_times_ms(exe)
    report = build_report(exe)
    host = {
        exe.schedule.steps.index(seg.host): seconds * 1e3  # type: ignore[arg-type]
        for seg_index, seconds in exe.encoder.host_seconds.items()
        for seg in [exe.encoder.segments[seg_index]]
        if seg.host is not None
    }
    for row in report.rows:
        if row["index"] in times:
            row["gpu_ms"] = times[row["index"]]
        elif row["index"] in host:
            row["host_ms"] = host[row["index"]]
    report.summary["gpu_ms_total"] = sum(times.values())
    return report

"""Where one decode token of a ``Generator`` goes (``bench_peers.py --breakdown``).

* GPU: the token's dispatches in the pass(es) the run uses, timed by timestamps at the passes'
  ends (``token_gpu_ms``); each dispatch alone in a pass of its own, summed by kernel
  (``by_kernel``: ranks kernels, but each figure carries one pass boundary); and the floor of a
  dependent dispatch: as many one-workgroup dispatches of a kernel that adds 1 to a word of a
  read-write buffer, in one pass (wgpu puts a barrier between them, as between the token's).
* Host: recording the token's dispatches and finishing the command buffer (``encode_ms``), and in
  the pipelined loop of ``generate`` the host time to submit a step (the next step's command
  buffer is recorded there) against the time spent waiting for a step's token.
"""

from __future__ import annotations

import collections
import re
import statistics
import time
from typing import Any

import wgpu

from rlxpy.wgpu_backend import profile

FLOOR_SHADER = """
@group(0) @binding(0) var<storage, read_write> b: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    b[g.x] = b[g.x] + 1u;
}
"""


def token_gpu_ms(exe: Any, segments: list, repeat: int = 20) -> float:
    """Median GPU ms of the token's passes (first pass's start to last pass's end)."""
    dev, encoder = exe.device, exe.encoder
    gpu = [s for s in segments if s.kind == "gpu"]
    times = []
    for _ in range(repeat):
        queries = dev.device.create_query_set(type="timestamp", count=2)
        command = dev.device.create_command_encoder()
        for segment in segments:
            if segment.kind != "gpu":
                exe.arena.gpu_copies(command, [segment.host.copy])
                continue
            writes = {"query_set": queries}
            if segment is gpu[0]:
                writes["beginning_of_pass_write_index"] = 0
            if segment is gpu[-1]:
                writes["end_of_pass_write_index"] = 1
            encoder._encode_pass(command, segment, writes if len(writes) > 1 else None)
        ticks = profile.submit_and_read_ms(dev, command, queries, 2)
        times.append(ticks[1] - ticks[0])
    return statistics.median(times)


def floor_us(dev: Any, dispatches: int, groups: int, repeat: int = 10, distinct: bool = False) -> float:
    """GPU µs per dependent dispatch of a trivial kernel (``groups`` workgroups each); ``distinct``:
    each dispatch writes a buffer of its own (no barrier between them)."""
    module = dev.device.create_shader_module(code=FLOOR_SHADER)
    pipeline = dev.device.create_compute_pipeline(layout="auto",
                                                  compute={"module": module, "entry_point": "main"})
    binds = []
    for _ in range(dispatches if distinct else 1):
        buf = dev.device.create_buffer(size=64 * 4 * max(groups, 1), usage=wgpu.BufferUsage.STORAGE)
        binds.append(dev.device.create_bind_group(layout=pipeline.get_bind_group_layout(0),
                                                  entries=[{"binding": 0, "resource": {"buffer": buf}}]))
    times = []
    for _ in range(repeat):
        queries = dev.device.create_query_set(type="timestamp", count=2)
        command = dev.device.create_command_encoder()
        cpass = command.begin_compute_pass(timestamp_writes={
            "query_set": queries, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1})
        cpass.set_pipeline(pipeline)
        for k in range(dispatches):
            cpass.set_bind_group(0, binds[k % len(binds)])
            cpass.dispatch_workgroups(groups, 1, 1)
        cpass.end()
        ticks = profile.submit_and_read_ms(dev, command, queries, 2)
        times.append(ticks[1] - ticks[0])
    return statistics.median(times) * 1e3 / dispatches


def encode_ms(exe: Any, segments: list, repeat: int = 20) -> dict[str, float]:
    """Host ms to record the token's passes and to finish the command buffer."""
    record = finish = 0.0
    for _ in range(repeat):
        command = exe.device.device.create_command_encoder()
        t0 = time.perf_counter()
        for s in segments:
            if s.kind == "gpu":
                exe.encoder._encode_pass(command, s)
        t1 = time.perf_counter()
        command.finish()
        record, finish = record + t1 - t0, finish + time.perf_counter() - t1
    return {"record_ms": record / repeat * 1e3, "finish_ms": finish / repeat * 1e3}


def pipelined_host(gen: Any, tokens: int = 128) -> dict[str, float]:
    """Mean host ms per step of ``generate``: submitting (Python + recording the next command
    buffer) and waiting for the step's token (readback)."""
    submit, wait = [], []
    original_submit, original_read = gen._submit_decode, gen._read

    def timed_submit(token: Any) -> Any:
        t0 = time.perf_counter()
        out = original_submit(token)
        submit.append(time.perf_counter() - t0)
        return out

    def timed_read(pending: Any) -> int:
        t0 = time.perf_counter()
        out = original_read(pending)
        wait.append(time.perf_counter() - t0)
        return out

    gen._submit_decode, gen._read = timed_submit, timed_read
    try:
        started = time.perf_counter()
        list(gen.generate([1], tokens + 1))
        wall = time.perf_counter() - started
    finally:
        del gen._submit_decode, gen._read
    return {"submit_ms": 1e3 * statistics.mean(submit), "wait_ms": 1e3 * statistics.mean(wait),
            "step_ms": 1e3 * wall / tokens}


def breakdown(gen: Any, tokens: int = 128) -> dict[str, Any]:
    exe = gen.exe
    steps = exe._needed([exe.graph["decode_next"]], True)[1]
    segments = exe.encoder.segments_for(steps)
    dispatched = [i for s in segments for _, _, i in s.dispatches if 0 not in exe.encoder.grids[i]]
    gen.decode(1)  # inputs in place for the replays below
    alone = profile.step_times_ms(exe)
    kernels: dict[str, dict[str, float]] = collections.defaultdict(lambda: {"dispatches": 0, "us": 0.0})
    for index in dispatched:
        row = kernels[exe.schedule.steps[index].kernel]
        row["dispatches"] += 1
        row["us"] += alone.get(index, 0.0) * 1e3
    by_kernel = dict(sorted(kernels.items(), key=lambda kv: -kv[1]["us"]))
    nodes: dict[str, list[float]] = collections.defaultdict(list)
    for index in dispatched:  # decode.<layer>.q_rope -> decode.N.q_rope
        label = re.sub(r"\.\d+(\.|$)", r".N\1", exe.schedule.steps[index].label)
        nodes[label].append(alone.get(index, 0.0) * 1e3)
    by_node = {name: {"dispatches": len(us), "us_each_median": statistics.median(us)}
               for name, us in nodes.items()}
    n = len(dispatched)
    return {
        "dispatches": n,
        "token_gpu_ms": token_gpu_ms(exe, segments),
        "sum_of_lone_dispatches_ms": sum(r["us"] for r in by_kernel.values()) / 1e3,
        "by_kernel": by_kernel,
        "floor_us_per_dispatch_1_group": floor_us(exe.device, n, 1),
        "floor_us_per_dispatch_128_groups": floor_us(exe.device, n, 128),
        "floor_us_per_dispatch_no_barrier": floor_us(exe.device, n, 1, distinct=True),
        "by_node": by_node,
        **encode_ms(exe, segments),
        **pipelined_host(gen, tokens),
    }

"""GGUF GEMV bandwidth: the decode path of DequantMatMulGguf on SmolLM2-135M shapes.

For each (type, n, k) a graph of ``copies`` GEMVs (x [rows, k] times distinct copies of the
weight, together larger than the GPU's L2) runs in one compute pass bracketed by timestamp
queries: GB/s = weight bytes read / GPU time of the pass, per GEMV µs = pass time / copies.
Consecutive dispatches in a pass are serialised by wgpu's barriers, as in a real decode step.
With CUDA present, torch reads the same number of fp16 weight bytes in one batched matmul: the
bandwidth yardstick of the same machine. Without timestamp queries, wall-clock is reported.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from common import emit, parse_args, torch_cuda

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.quant import gguf_row_bytes

SHAPES = [(576, 576), (1536, 576), (576, 1536), (49152, 576)]  # (n, k): attn, ffn up, ffn down, lm_head
QTYPES = ["Q4_1", "Q8_0"]
TARGET_BYTES = 192 << 20  # per shape: several times the H100's 50 MB L2, so weights come from HBM


def quantised(qtype: str, n: int, k: int, seed: int) -> np.ndarray:
    from gguf import GGMLQuantizationType, quants

    values = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)
    return quants.quantize(values, GGMLQuantizationType[qtype]).reshape(n, -1)


def gpu_pass_seconds(exe, repeat: int = 15, warmup_s: float = 2.0) -> tuple[float, float] | None:
    """(median, best) GPU time of one compute pass holding every GPU step of ``exe`` (timestamp
    queries), after ``warmup_s`` seconds of the same passes: an H100's clocks take seconds to ramp
    up, and first measurements read 2-4x slow."""
    import wgpu

    dev = exe.device
    if "timestamp-query" not in dev.features:
        return None
    encoder_state = exe.encoder
    dispatches = []
    for segment in encoder_state.segments:
        if segment.kind == "gpu":
            for entry in segment.dispatches:
                pipeline, slot, index = entry[0], entry[1], entry[-1]
                dispatches.append((pipeline, slot, encoder_state.grids[index]))
    queries = dev.device.create_query_set(type="timestamp", count=2)
    usage = wgpu.BufferUsage
    resolve = dev.device.create_buffer(size=256, usage=usage.QUERY_RESOLVE | usage.COPY_SRC)
    readback = dev.device.create_buffer(size=256, usage=usage.MAP_READ | usage.COPY_DST)
    try:
        from wgpu.backends.wgpu_native._ffi import lib

        period_ns = float(lib.wgpuQueueGetTimestampPeriod(dev.queue._internal))
    except Exception:  # noqa: BLE001  (older wgpu-native: nanoseconds already)
        period_ns = 1.0
    times: list[float] = []
    warm_until = time.perf_counter() + warmup_s
    while len(times) < repeat:
        command = dev.device.create_command_encoder(label="bench_quant")
        cpass = command.begin_compute_pass(timestamp_writes={
            "query_set": queries, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1})
        for pipeline, slot, grid in dispatches:
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, encoder_state.bind_group, encoder_state.offsets[2 * slot: 2 * slot + 2])
            cpass.dispatch_workgroups(*grid)
        cpass.end()
        command.resolve_query_set(queries, 0, 2, resolve, 0)
        command.copy_buffer_to_buffer(resolve, 0, readback, 0, 16)
        dev.queue.submit([command.finish()])
        readback.map_sync(wgpu.MapMode.READ, 0, 16)
        ticks = np.frombuffer(readback.read_mapped(0, 16), dtype=np.uint64).astype(np.int64)
        readback.unmap()
        if time.perf_counter() >= warm_until:
            times.append(float(ticks[1] - ticks[0]) * period_ns * 1e-9)
    return statistics.median(times), min(times)


def bench_one(qtype: str, n: int, k: int, rows: int, target: int) -> dict:
    raw = quantised(qtype, n, k, seed=n + k)
    weight_bytes = raw.size
    copies = int(min(512, max(2, target // weight_bytes)))
    g = rlxpy.Graph(f"gemv_{qtype}_{n}x{k}")
    x = g.input("x", (rows, k))
    outs = [g.dequant_matmul_gguf(x, g.param(f"w{i}", raw.shape, DType.U8), qtype, n, k, name=f"y{i}")
            for i in range(copies)]
    g.output(*outs)
    started = time.perf_counter()
    exe = rlxpy.compile(g)
    payload = raw.tobytes()
    for i in range(copies):
        exe.set_param_bytes(f"w{i}", payload)
    compile_s = time.perf_counter() - started
    xv = np.random.default_rng(1).standard_normal((rows, k)).astype(np.float32)
    got = exe.run({"x": xv})
    from gguf import GGMLQuantizationType, quants

    want = xv.astype(np.float64) @ quants.dequantize(raw, GGMLQuantizationType[qtype]).astype(np.float64).T
    error = float(np.abs(got["y0"] - want).max() / max(1e-30, np.abs(want).max()))
    kernels = sorted({s.kernel for s in exe.schedule.steps})
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        exe.run({"x": xv}, outputs=["y0"])
        walls.append(time.perf_counter() - t0)
    gpu = gpu_pass_seconds(exe)
    seconds, best = gpu if gpu is not None else (statistics.median(walls), min(walls))
    result = {
        "qtype": qtype, "n": n, "k": k, "rows": rows, "weight_bytes": weight_bytes, "copies": copies,
        "kernels": kernels, "max_rel_error": error, "compile_s": compile_s,
        "timing": "gpu" if gpu is not None else "wall",
        "us_per_gemv": seconds / copies * 1e6, "gb_per_s": weight_bytes * copies / seconds / 1e9,
        "best_us_per_gemv": best / copies * 1e6, "best_gb_per_s": weight_bytes * copies / best / 1e9,
        "wall_ms_per_run": statistics.median(walls) * 1e3,
    }
    exe.destroy()
    return result


def torch_yardstick(torch, n: int, k: int, rows: int, target: int) -> dict:
    """fp16 weights of ~``target`` bytes read by one batched matmul: achievable bandwidth."""
    copies = max(1, target // (n * k * 2))
    w = torch.randn(copies, n, k, device="cuda", dtype=torch.float16)
    x = torch.randn(copies, k, rows, device="cuda", dtype=torch.float16)
    for _ in range(3):
        torch.bmm(w, x)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(7):
        start.record()
        torch.bmm(w, x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    seconds = statistics.median(times)
    return {"n": n, "k": k, "copies": copies, "gb_per_s": copies * n * k * 2 / seconds / 1e9}


def main() -> None:
    args = parse_args(__doc__)
    shapes = [(64, 256), (96, 512)] if args.quick else SHAPES
    target = (1 << 20) if args.quick else TARGET_BYTES
    results: dict = {"gemv": [], "torch_fp16_bmm": []}
    for qtype in QTYPES:
        for n, k in shapes:
            row = bench_one(qtype, n, k, 1, target)
            results["gemv"].append(row)
            print(f"{qtype:5s} n={n:6d} k={k:5d}  {row['us_per_gemv']:9.2f} us  {row['gb_per_s']:8.1f} GB/s "
                  f"(best {row['best_gb_per_s']:.1f}; {row['timing']}, {row['copies']} copies, "
                  f"rel err {row['max_rel_error']:.1e})", flush=True)
    torch = torch_cuda()
    if torch is not None:
        for n, k in shapes:
            row = torch_yardstick(torch, n, k, 1, target)
            results["torch_fp16_bmm"].append(row)
            print(f"torch fp16 bmm n={n:6d} k={k:5d}  {row['gb_per_s']:8.1f} GB/s (yardstick)", flush=True)
    results["row_bytes"] = {q: {f"{n}x{k}": gguf_row_bytes(q, k) for n, k in shapes} for q in QTYPES}
    emit(results, args.json)


if __name__ == "__main__":
    main()

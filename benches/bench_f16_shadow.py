"""f16 weight shadow against plain f32: a chain of linear layers whose f32 weights exceed one binding.

Graph: x [M, D] -> L x linear(W_i [D, D], b_i), relu between layers. The full size (12 x 8192^2 f32,
3 GiB) needs bind windows on an H100 (binding cap 2 GiB - 4, max buffer 4 GiB) as f32 and fits one
binding as f16. Three rlxpy runs share the weights:
  f32         plain f32 weights: bind windows + staging, the tiled GEMM
  f32_skinny  f32 weights through the skinny GEMM (the f16 path's kernel: kernel vs dtype apart)
  f16         the f16 shadow (RLX_WGPU_F16_WEIGHTS=1): half the arena, half the bytes to read
beside torch CUDA fp32 (TF32 off) and fp16 on the same layers when CUDA is present. Every run is
checked on its first rows against numpy (f32 weights; the f16 run also against the f16-rounded
weights). Reported: ms per forward (back-to-back runs, one wait), GB/s of weight bytes read per
forward, and the per-layer GPU time of the matmul kernel (timestamp queries).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import time

import numpy as np
from common import cuda_time, emit, torch_cuda

import rlxpy
from rlxpy import env
from rlxpy.errors import UnsupportedOpError
from rlxpy.wgpu_backend.lowering import matmul_skinny
from rlxpy.wgpu_backend.profile import step_times_ms

MODES = ("f32", "f32_skinny", "f16")
TOLERANCE = {"f32": 1e-3, "f32_skinny": 1e-3, "f16": 1e-3, "f16_vs_f32": 3e-2}  # of max |reference|


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--dim", type=int, help="D: each weight is [D, D] f32 (default 8192)")
    parser.add_argument("--rows", help="comma-separated M values (default 1,16,128)")
    parser.add_argument("--max-binding", type=int, help="RLX_WGPU_MAX_BINDING (default: device)")
    parser.add_argument("--check-rows", type=int, default=2, help="rows checked against numpy")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="lavapipe smoke size: D 256, M 1,3,17, a 2 MiB binding cap")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args()
    quick = {"dim": 256, "rows": "1,3,17", "max_binding": 2 << 20}
    full = {"dim": 8192, "rows": "1,16,128", "max_binding": 0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.rows = [int(r) for r in args.rows.split(",")]
    return args


def make_layer(seed: int, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """He-scaled W (so a relu chain keeps its scale), its f16 copy, and a small bias."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((dim, dim), dtype=np.float32)
    w *= np.float32(np.sqrt(2.0 / dim))
    b = rng.standard_normal(dim, dtype=np.float32) * np.float32(0.1)
    return w, w.astype(np.float16), b


def make_weights(layers: int, dim: int, seed: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    # numpy's generators and casts release the GIL: one thread per layer
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(layers, os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda i: make_layer(seed * 1000 + i, dim), range(layers)))


def reference(x: np.ndarray, weights, half: bool) -> np.ndarray:
    """The chain on the host in f32 (BLAS), from the f32 or the f16-rounded weights."""
    h = x
    for i, (w, w16, b) in enumerate(weights):
        h = h @ (w16.astype(np.float32) if half else w) + b
        if i < len(weights) - 1:
            h = np.maximum(h, 0)
    return h


def chain_graph(rows: int, dim: int, layers: int) -> rlxpy.Graph:
    g = rlxpy.Graph(f"chain{layers}x{dim}_m{rows}")
    h = g.input("x", [rows, dim])
    for i in range(layers):
        act = "relu" if i < layers - 1 else None
        h = g.linear(h, g.param(f"w{i}", [dim, dim]), g.param(f"b{i}", [dim]), activation=act, name=f"h{i}")
    g.output(h)
    return g


def compile_mode(graph: rlxpy.Graph, mode: str, max_binding: int):
    flags = {"RLX_WGPU_F16_WEIGHTS": int(mode == "f16")}
    if max_binding:
        flags["RLX_WGPU_MAX_BINDING"] = max_binding
    matmul_skinny.SKINNY_F32 = mode == "f32_skinny"
    try:
        with env.override(**flags):
            return rlxpy.compile(graph)
    finally:
        matmul_skinny.SKINNY_F32 = False


def per_forward(run, trials: int) -> float:
    """Median seconds per forward of back-to-back runs (one wait per trial), ~0.3 s per trial."""
    run(1)
    started = time.perf_counter()
    run(1)
    reps = max(1, min(50, int(0.3 / max(time.perf_counter() - started, 1e-6))))
    times = []
    for _ in range(trials):
        started = time.perf_counter()
        run(reps)
        times.append((time.perf_counter() - started) / reps)
    return statistics.median(times)


def bench_rlxpy(args, rows: int, mode: str, weights, x: np.ndarray, refs: dict[str, np.ndarray]) -> dict:
    started = time.perf_counter()
    exe = compile_mode(chain_graph(rows, args.dim, args.layers), mode, args.max_binding)
    compiled = time.perf_counter()
    for i, (w, w16, b) in enumerate(weights):
        if mode == "f16":
            exe.set_param_bytes(f"w{i}", w16)  # the f16 bytes as they are: no second rounding pass
        else:
            exe.set_param(f"w{i}", w)
        exe.set_param(f"b{i}", b)
    exe.sync()
    uploaded = time.perf_counter()
    feeds = {"x": x[:rows]}
    y = exe.run(feeds)[f"h{args.layers - 1}"]
    c = min(args.check_rows, rows)
    errors = {}
    for name, ref in refs.items():
        scale = float(np.abs(ref[:c]).max()) or 1.0
        errors[name] = float(np.abs(y[:c].astype(np.float64) - ref[:c]).max() / scale)

    def run(reps: int) -> None:
        for _ in range(reps):
            exe.run(feeds)
        exe.sync()

    with exe.flags.override(dispatch_only=1):
        seconds = per_forward(run, args.trials)
        exe.run(feeds)
        try:
            step_ms = step_times_ms(exe)
        except UnsupportedOpError:  # no timestamp queries on this adapter
            step_ms = {}
    steps = exe.schedule.steps
    matmuls = [i for i, s in enumerate(steps) if s.kernel in ("matmul_tiled", "matmul_skinny")]
    layer_ms = statistics.median(step_ms[i] for i in matmuls) if step_ms else None
    summary = exe.report().summary
    weight_bytes = args.layers * args.dim * args.dim * (2 if mode == "f16" else 4)
    row = {
        "mode": mode, "kernels": sorted({steps[i].kernel for i in matmuls}), "ms": seconds * 1e3,
        "weight_gbps": weight_bytes / seconds / 1e9, "matmul_layer_ms": layer_ms,
        "matmul_gbps": weight_bytes / args.layers / (layer_ms / 1e3) / 1e9 if layer_ms else None,
        "rel_error": errors, "arena_mib": summary["arena_mib"], "windows": summary["windows"],
        "staged_mib": summary["staged_mib"], "shadow_params": summary["shadow_params"],
        "steps": summary["steps"], "compile_s": compiled - started, "upload_s": uploaded - compiled,
    }
    exe.destroy()
    return row


def bench_torch(torch, args, rows: int, tweights, x: np.ndarray) -> dict:
    out = {}
    for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        torch.backends.cuda.matmul.allow_tf32 = False
        tx = torch.from_numpy(x[:rows]).cuda().to(dtype)
        layers = tweights[name]

        def forward(tx=tx, layers=layers) -> None:
            h = tx
            for i, (w, b) in enumerate(layers):
                h = torch.addmm(b, h, w)
                if i < len(layers) - 1:
                    h = torch.relu(h)

        seconds = cuda_time(torch, forward, repeat=10, warmup=3)
        weight_bytes = args.layers * args.dim * args.dim * (2 if name == "fp16" else 4)
        out[name] = {"ms": seconds * 1e3, "weight_gbps": weight_bytes / seconds / 1e9}
    return out


def odd_shape_checks() -> list[str]:
    """The f16 path on odd shapes first (n odd puts every other weight row at an odd half-word; f16
    subnormals must convert exactly): one-hot rows read each stored weight row back."""
    failures = []
    rng = np.random.default_rng(7)
    for rows, k, n in ((1, 17, 255), (3, 33, 1), (17, 64, 257)):
        g = rlxpy.Graph(f"odd_{rows}_{k}_{n}")
        g.output(g.matmul(g.input("x", [rows, k]), g.param("w", [k, n]), name="y"))
        exe = compile_mode(g, "f16", 0)
        w = (rng.standard_normal((k, n), dtype=np.float32) * np.float32(0.3)).astype(np.float32)
        w.flat[::7] = np.float32(3e-6)  # an f16 subnormal
        exe.set_param("w", w)
        w16 = w.astype(np.float16).astype(np.float32)
        eye = np.eye(k, dtype=np.float32)
        picked = np.concatenate([exe.run({"x": eye[i:i + rows]})["y"] for i in range(0, k - rows + 1, rows)])
        if not np.array_equal(picked, w16[: len(picked)]):
            failures.append(f"odd shape {rows}x{k}x{n}: f16 weights not read back exactly")
        x = rng.standard_normal((rows, k), dtype=np.float32)
        err = np.abs(exe.run({"x": x})["y"] - x.astype(np.float64) @ w16).max()
        if not err <= 1e-5 * np.abs(x).sum(axis=1).max():
            failures.append(f"odd shape {rows}x{k}x{n}: error {err:.3g}")
        exe.destroy()
    return failures


def main() -> None:
    args = parse_args()
    torch = torch_cuda()
    started = time.perf_counter()
    weights = make_weights(args.layers, args.dim, args.seed)
    x = np.random.default_rng(args.seed + 1).standard_normal((max(args.rows), args.dim), dtype=np.float32)
    c = min(args.check_rows, max(args.rows))
    ref32, ref16 = reference(x[:c], weights, half=False), reference(x[:c], weights, half=True)
    host_s = time.perf_counter() - started
    tweights = None
    if torch is not None:
        tweights = {name: [(torch.from_numpy(w).cuda().to(dtype), torch.from_numpy(b).cuda().to(dtype))
                           for w, _, b in weights]
                    for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16))}
    results: dict = {
        "layers": args.layers, "dim": args.dim, "max_binding": args.max_binding,
        "f32_weight_gib": args.layers * args.dim**2 * 4 / 2**30, "host_setup_s": host_s, "rows": [],
    }
    failures = odd_shape_checks()
    for rows in args.rows:
        entry: dict = {"m": rows}
        for mode in MODES:
            refs = {"f32": ref32, "f16": ref16} if mode == "f16" else {"f32": ref32}
            row = bench_rlxpy(args, rows, mode, weights, x, refs)
            entry[mode] = row
            limit = {"f32": TOLERANCE["f16_vs_f32" if mode == "f16" else mode], "f16": TOLERANCE["f16"]}
            failures += [f"m={rows} {mode} vs {name} weights: relative error {err:.3g} > {limit[name]:g}"
                         for name, err in row["rel_error"].items() if not err <= limit[name]]
            print(f"m={rows:<4} {mode:<10} {row['ms']:9.3f} ms  {row['weight_gbps']:8.1f} GB/s  "
                  f"err {row['rel_error']}", flush=True)
        entry["f16_speedup_vs_f32"] = entry["f32"]["ms"] / entry["f16"]["ms"]
        entry["f16_speedup_vs_f32_skinny"] = entry["f32_skinny"]["ms"] / entry["f16"]["ms"]
        if torch is not None:
            entry["torch"] = bench_torch(torch, args, rows, tweights, x)
            entry["ratio_f16_vs_torch_fp16"] = entry["torch"]["fp16"]["ms"] / entry["f16"]["ms"]
            entry["ratio_f32_vs_torch_fp32"] = entry["torch"]["fp32"]["ms"] / entry["f32"]["ms"]
        results["rows"].append(entry)
    results["failures"] = failures
    emit(results, args.json)
    if failures:
        raise SystemExit("correctness check failed:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()

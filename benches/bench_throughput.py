"""Matmul and element-wise throughput: rlxpy (WebGPU) beside torch CUDA, as ratios.

matmul: square f32 GEMMs (n^3) and few-row GEMMs [M, D] x [D, D]. Each case is one graph chaining R
matmuls by the same weight (h = h @ w, w scaled by 1/sqrt(D) so values stay put), run as a whole
with no readback, so per-run costs spread over R kernels; torch runs the same chain (TF32 off).
Every rlxpy case is checked on its first rows against numpy (float64). --variants adds every tile
shape of the tiled kernel with and without 16-byte access, and at each M the skinny and the tiled
kernel side by side (the data behind matmul.TILES / MIN_GROUPS and matmul_skinny.F32_MAX_ROWS).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
from common import cuda_time, emit, timeit, torch_cuda

import rlxpy
from rlxpy.wgpu_backend.lowering import matmul, matmul_skinny

CHECK_ROWS = 2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the results here as JSON (rewritten after every case)")
    parser.add_argument("--quick", action="store_true", help="small sizes (lavapipe smoke run)")
    parser.add_argument("--variants", choices=("none", "routing", "all"), default="none",
                        help="routing: few-row cases through each kernel too; all: every tile and access too")
    parser.add_argument("--sizes", help="comma-separated square n (default 1024,2048,4096)")
    parser.add_argument("--dim", type=int, help="D of the few-row set (default 8192)")
    parser.add_argument("--rows", help="comma-separated M of the few-row set (default 1,16,32,64,128,256)")
    parser.add_argument("--no-elementwise", action="store_true")
    args = parser.parse_args()
    quick = {"sizes": "128,256", "dim": 512, "rows": "1,16,32,64"}
    full = {"sizes": "1024,2048,4096", "dim": 8192, "rows": "1,16,32,64,128,256"}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.rows = [int(r) for r in args.rows.split(",")]
    return args


def chain_graph(m: int, d: int, reps: int) -> rlxpy.Graph:
    g = rlxpy.Graph(f"chain{reps}_{m}x{d}")
    h, w = g.param("x", [m, d]), g.param("w", [d, d])
    for i in range(reps):
        h = g.matmul(h, w, name=f"h{i}")
    g.output(h)
    return g


def reps_for(m: int, d: int) -> int:
    """R: about 2^35 multiply-adds or 2 GiB of weight reads per run, between 2 and 16 matmuls."""
    return max(2, min(16, round(min(2**35 / (m * d * d), 2**29 / (d * d)))))


# name -> module settings: (matmul.FORCE_TILE, matmul.VEC4, matmul_skinny.SKINNY_F32)
SWITCHES = ((matmul, "FORCE_TILE"), (matmul, "VEC4"), (matmul_skinny, "SKINNY_F32"))
TILES = [(128, 128), (128, 64), (64, 128), (64, 64)]


def configs(variants: str, few_rows: bool) -> dict[str, tuple[Any, bool, bool | None]]:
    chosen: dict[str, tuple[Any, bool, bool | None]] = {"auto": (None, True, None)}
    if variants != "none" and few_rows:
        chosen.update({"skinny": (None, True, True), "tiled_auto": (None, True, False)})
    if variants == "all":
        chosen.update({f"tiled{bm}x{bn}": ((bm, bn), True, False) for bm, bn in TILES})
        if not few_rows:
            chosen.update({f"tiled{bm}x{bn}_words": ((bm, bn), False, False) for bm, bn in TILES})
    return chosen


def compile_with(graph: rlxpy.Graph, setting: tuple[Any, bool, bool | None]):
    saved = [getattr(module, name, None) for module, name in SWITCHES]
    for (module, name), value in zip(SWITCHES, setting):
        setattr(module, name, value)
    try:
        return rlxpy.compile(graph)
    finally:
        for (module, name), value in zip(SWITCHES, saved):
            setattr(module, name, value)


def describe(step) -> str:
    found = [re.search(rf"const {a}: u32 = (\d+)u", step.source) for a in ("BM", "BN")]
    if step.kernel != "matmul_tiled" or None in found:  # another kernel, or a tiled one without BM/BN
        return step.kernel
    bm, bn = (int(f.group(1)) for f in found)
    return f"tiled {bm}x{bn} {'vec4' if 'array<vec4<u32>>' in step.source else 'words'}"


def bench_case(m: int, d: int, setting, x: np.ndarray, w: np.ndarray, want: np.ndarray) -> dict:
    reps = reps_for(m, d)
    exe = compile_with(chain_graph(m, d, reps), setting)
    exe.set_param("x", x)
    exe.set_param("w", w)
    got = exe.run()[f"h{reps - 1}"][:CHECK_ROWS]
    err = float(np.abs(got - want).max() / (np.abs(want).max() or 1.0))
    with exe.flags.override(dispatch_only=1):
        seconds = timeit(lambda: (exe.run(), exe.sync()), repeat=5, warmup=1) / reps
    row = {"m": m, "k": d, "n": d, "reps": reps, "kernel": describe(exe.schedule.steps[0]),
           "ms": seconds * 1e3, "tflops": 2 * m * d * d / seconds / 1e12, "rel_err": err}
    exe.destroy()
    return row


def reference(x: np.ndarray, w: np.ndarray, reps: int) -> np.ndarray:
    h = x[:CHECK_ROWS].astype(np.float64)
    for _ in range(reps):
        h = h @ w
    return h


def torch_case(torch, x: np.ndarray, w: np.ndarray, reps: int) -> float:
    torch.backends.cuda.matmul.allow_tf32 = False
    tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()

    def chain() -> None:
        h = tx
        for _ in range(reps):
            h = h @ tw

    return cuda_time(torch, chain, repeat=5, warmup=2) / reps


def bench_matmuls(args, torch, results: dict) -> None:
    cases = [("square", n, n) for n in args.sizes] + [("few_rows", m, args.dim) for m in args.rows]
    for group, m, d in cases:
        rng = np.random.default_rng(m + d)
        x = rng.standard_normal((m, d), np.float32)
        w = (rng.standard_normal((d, d), np.float32) / np.float32(np.sqrt(d))).astype(np.float32)
        want = reference(x, w, reps_for(m, d))
        torch_s = torch_case(torch, x, w, reps_for(m, d)) if torch is not None else None
        for name, setting in configs(args.variants, group == "few_rows").items():
            row = {"case": group, "config": name, **bench_case(m, d, setting, x, w, want)}
            if torch_s is not None:
                row["torch_ms"] = torch_s * 1e3
                row["torch_tflops"] = 2 * m * d * d / torch_s / 1e12
                row["ratio"] = row["tflops"] / row["torch_tflops"]
            results["matmul"].append(row)
            print(f"{group:8} {m:5}x{d}x{d} {name:18} {row['kernel']:20} {row['ms']:8.3f} ms "
                  f"{row['tflops'] * 1e3:8.1f} GFLOP/s torch {row.get('torch_tflops', 0) * 1e3:8.1f} "
                  f"err {row['rel_err']:.0e}", file=sys.stderr)
            if args.json:  # partial results survive a run cut short
                Path(args.json).write_text(json.dumps(results, indent=1))


def elementwise_graph(n: int) -> rlxpy.Graph:
    g = rlxpy.Graph("ew")
    x = g.param("x", [n])
    g.output(g.add(g.mul(x, g.param("two", [n])), g.param("one", [n]), name="y"))
    return g


def bench_elementwise(args, torch, results: dict) -> None:
    n = (1 << 20) if args.quick else (64 << 20)  # elements: 256 MiB of f32 at full size
    exe = rlxpy.compile(elementwise_graph(n))
    for name, value in (("x", 1.0), ("two", 2.0), ("one", 1.0)):
        exe.set_param(name, np.full(n, value, np.float32))
    with exe.flags.override(dispatch_only=1):
        seconds = timeit(lambda: (exe.run(), exe.sync()), repeat=10, warmup=2)
    row = {"bytes": n * 4, "rlxpy_gbps": 4 * n * 4 / seconds / 1e9}  # 3 reads + 1 write
    if torch is not None:
        tx = torch.ones(n, device="cuda")
        t2, t1 = torch.full_like(tx, 2.0), torch.ones_like(tx)
        t = cuda_time(torch, lambda: torch.addcmul(t1, tx, t2))
        row["torch_gbps"] = 4 * n * 4 / t / 1e9
        row["ratio"] = row["rlxpy_gbps"] / row["torch_gbps"]
    results["elementwise"].append(row)
    exe.destroy()


def main() -> None:
    args = parse_args()
    torch = torch_cuda()
    results: dict = {"matmul": [], "elementwise": []}
    bench_matmuls(args, torch, results)
    if not args.no_elementwise:
        bench_elementwise(args, torch, results)
    emit(results, args.json)


if __name__ == "__main__":
    main()

"""f32 GEMM core (matmul_tiled) against torch CUDA f32 (TF32 off), side by side in one process.

For each shape M x N x K (a [M, K] @ w [K, N]) the default plan and every ``--variants`` entry (a forced
tile, K step and block sum of matmul.py's tiled GEMM, split K off) run on the same inputs. Times are
GPU times: the median over ``--reps`` replays of the schedule's summed step timestamps (rlxpy) and of
CUDA-event times (torch). ``tflops`` counts 2 M N K; ``ratio`` = torch ms / rlxpy ms (> 1: rlxpy is
faster). ``err`` is each result's rms error against torch's float64 product, relative to that
product's rms, and ``err_vs_torch`` divides it by torch f32's.

One command: ``python benches/bench_gemm.py [--quick] [--json out.json]``; a variant is
``TILE_BK_SUMS[_gROWS][_sCHUNKS]`` (e.g. ``128x128_8_stepq_g8``; sums: step, steph, stepq, kN, none, see
lowering/matmul_core; gROWS: matmul.GROUP_ROWS, the workgroup walk's band of tile rows; sCHUNKS: K
split into that many chunks, default none). ``--grouped`` runs bench_scan's
GroupedMatMul rows (8 / 64 experts x 4096 rows) for the default plan and each listed variant of
matmul_grouped's tile (TILE_BK_SUMS); ``--train-shapes`` times the GPT training step's GEMMs with
their operands stored as its backward pass stores them (x^T dy, dy W^T) instead; ``--train`` adds
bench_train's timing of the GPT training step
(eager torch beside it). ``--quick`` runs small shapes (a lavapipe smoke run; without CUDA the torch
side runs on the CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from common import emit, torch_cuda

import rlxpy
from rlxpy.ir import ops
from rlxpy.wgpu_backend.lowering import matmul
from rlxpy.wgpu_backend.profile import step_times_ms

#: (M, N, K): square GEMMs, a 256-row prefill block, and the GPT training step's MLP GEMMs
SHAPES = [(4096, 4096, 4096), (1024, 1024, 1024), (256, 4096, 4096), (4096, 384, 1536), (4096, 1536, 384)]
QUICK_SHAPES = [(256, 256, 256), (130, 96, 200), (130, 96, 200, True, False), (130, 96, 200, False, True)]
#: the GEMMs of bench_train's GPT step (d 384, MLP 1536, 16 x 256 tokens) with the operands as its
#: backward pass stores them: (M, N, K, a stored [K, M], w stored [N, K]). dW = x^T dy reads x
#: transposed (K = the 4096 tokens; split K), dx = dy W^T reads W transposed.
TRAIN_SHAPES = [(4096, 1152, 384, False, False), (4096, 384, 1536, False, True),
                (4096, 384, 1152, False, True), (384, 1536, 4096, True, False),
                (1536, 384, 4096, True, False), (384, 1152, 4096, True, False)]


def parse_shape(spec: str) -> tuple:
    """``MxNxK`` with ``_ta`` / ``_tb`` for a stored transposed (a [K, M] / w [N, K])."""
    dims, *flags = spec.split("_")
    m, n, k = (int(v) for v in dims.split("x"))
    return (m, n, k, "ta" in flags, "tb" in flags)
#: the former default's core (64x64 16-deep), the default's neighbours (depth, tile, block sums,
#: workgroup walk) and one running sum (no block sum: its cost). On an H100 on 2026-11-26 128x128 and
#: 128x64 tiles (any depth and sums) and 16-deep 64x128 lost to 8-deep 64x128 at 4096^3; name them to
#: sweep them again.
VARIANTS = ["64x64_16_step", "64x64_8_step", "64x128_8_none", "64x128_16_stepq", "64x128_8_stepq_g8",
            "64x256_8_stepq", "128x128_8_stepq", "128x128_8_none"]


def parse_variant(spec: str) -> tuple[tuple[int, int], tuple[int, str], int, int]:
    """(tile, (BK, sums), group rows, K chunks) of a variant name (``_gN``: group rows, ``_sN``: N K
    chunks; default 0 and 1)."""
    tile, bk, sums, *rest = spec.split("_")
    bm, bn = (int(v) for v in tile.split("x"))
    extra = {part[0]: int(part[1:]) for part in rest}
    return (bm, bn), (int(bk), sums), extra.get("g", 0), extra.get("s", 1)


def rlxpy_run(a: np.ndarray, w: np.ndarray, reps: int, trans: tuple[bool, bool] = (False, False)
              ) -> tuple[np.ndarray, float, list[str]]:
    g = rlxpy.Graph("gemm")
    op = ops.MatMul(transpose_a=trans[0], transpose_b=trans[1])
    y = g.apply(op, [g.input("a", list(a.shape)), g.input("w", list(w.shape))], "y")
    g.output(y)
    exe = rlxpy.compile(g)
    got = exe.run({"a": a, "w": w})["y"]
    ms = statistics.median(sum(step_times_ms(exe).values()) for _ in range(reps))
    kernels = [f"{s.kernel}{list(s.grid)}" for s in exe.schedule.steps]
    return got, ms, kernels


def torch_side(torch: Any, cuda: bool, a: np.ndarray, w: np.ndarray, reps: int,
               trans: tuple[bool, bool] = (False, False)) -> tuple[Any, float, Any]:
    """torch's f32 product, its time (ms) and the float64 product (``trans``: a / w stored transposed,
    read through .mT views, which cuBLAS takes as they are)."""
    dev = "cuda" if cuda else "cpu"
    ta, tw = torch.from_numpy(a).to(dev), torch.from_numpy(w).to(dev)
    ta, tw = (ta.mT if trans[0] else ta), (tw.mT if trans[1] else tw)
    want = (ta.double() @ tw.double())
    if not cuda:
        return (ta @ tw), float("nan"), want
    times = []
    for i in range(reps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = ta @ tw
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    return out, statistics.median(times), want


def rel_rms(torch: Any, got: Any, want: Any) -> float:
    got = torch.as_tensor(got).to(want.device).double()
    return float(((got - want).square().mean() / want.square().mean()).sqrt())


def bench_shape(torch: Any, cuda: bool, shape: tuple[int, int, int], variants: list[str], reps: int
                ) -> dict[str, Any]:
    m, n, k = shape[:3]
    trans = (bool(shape[3]), bool(shape[4])) if len(shape) == 5 else (False, False)
    r = np.random.default_rng(0)
    a = r.standard_normal((k, m) if trans[0] else (m, k)).astype(np.float32)
    w = (r.standard_normal((n, k) if trans[1] else (k, n)) / np.sqrt(k)).astype(np.float32)
    ours, torch_ms, want = torch_side(torch, cuda, a, w, reps, trans)
    torch_err = rel_rms(torch, ours, want)
    tflop = 2 * m * n * k / 1e9
    row: dict[str, Any] = {"shape": list(shape), "torch_ms": torch_ms, "torch_tflops": tflop / torch_ms,
                           "torch_err": torch_err, "rlxpy": {}}
    for name in ["default", *variants]:
        saved = matmul.GROUP_ROWS
        tile, core, group, splits = ((None, None, saved, None) if name == "default" else parse_variant(name))
        matmul.FORCE_TILE, matmul.FORCE_CORE, matmul.GROUP_ROWS = tile, core, group
        matmul.FORCE_SPLITS = splits
        try:
            got, ms, kernels = rlxpy_run(a, w, reps, trans)
        finally:
            matmul.FORCE_TILE, matmul.FORCE_CORE, matmul.FORCE_SPLITS = None, None, None
            matmul.GROUP_ROWS = saved
        err = rel_rms(torch, got, want)
        row["rlxpy"][name] = {"ms": round(ms, 4), "tflops": round(tflop / ms, 2),
                              "ratio": round(torch_ms / ms, 3), "err": err,
                              "err_vs_torch": round(err / torch_err, 3), "steps": kernels}
        print(f"{shape} {name:18s} {ms:8.4f} ms {tflop / ms:6.2f} TFLOP/s ratio {torch_ms / ms:5.3f} "
              f"err/torch {err / torch_err:5.2f}", flush=True)
    return row


def bench_grouped_variants(variants: list[str], quick: bool) -> list[dict[str, Any]]:
    """bench_scan's GroupedMatMul rows for the default plan and each forced tile / depth / sums."""
    from bench_scan import Side, bench_grouped

    from rlxpy.wgpu_backend.lowering import matmul_grouped as grouped

    side = Side()
    cases = [(2, 64, 128, 300)] if quick else [(8, 2048, 8192, 4096), (64, 2048, 1408, 4096)]
    rows = []
    for experts, k, n, count in cases:
        for name in ["default", *variants]:
            saved = grouped.FORCE_TILE, grouped.FORCE_CORE
            if name != "default":
                tile, plan, _, _ = parse_variant(name)
                grouped.FORCE_TILE, grouped.FORCE_CORE = tile, plan
            try:
                row = bench_grouped(side, experts, k, n, count, 3 if quick else 10)
            finally:
                grouped.FORCE_TILE, grouped.FORCE_CORE = saved
            rows.append({"variant": name, **row})
            print(f"grouped {experts}x{count} {name:18s} gpu {row['rlxpy']['gpu_ms']} ms torch "
                  f"{row['torch_ms']:.3f} ratio {row['ratio']} err {row['rel_error']:.2e} "
                  f"err/torch {row['err_vs_torch']:.2f}", flush=True)
    return rows


def bench_train_step(quick: bool) -> dict[str, Any]:
    """bench_train's timing of the GPT training step (torch eager beside it; no torch.compile)."""
    import bench_train

    from rlxpy.models.gpt import GptConfig

    bench_train.torch_compiled_timing = lambda *args: {}
    cfg = (GptConfig(vocab=256, d_model=64, heads=2, layers=2, seq=32, batch=2) if quick
           else GptConfig(vocab=256, d_model=384, heads=6, layers=6, seq=256, batch=16))
    out = bench_train.timing(cfg, 2 if quick else 10)
    print("train", {k: v for k, v in out.items() if "step_ms" in k or "over" in k}, flush=True)
    return out


def save(out: dict[str, Any], path: str | None) -> None:
    """What is done so far, quietly (it survives a time limit); emit prints the whole at the end."""
    if path:
        Path(path).write_text(json.dumps(out, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", nargs="*", default=None, help="TILE_BK_SUMS entries (default: a sweep)")
    parser.add_argument("--shapes", nargs="*", default=None,
                        help="MxNxK entries (_ta / _tb: a / w stored transposed)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--grouped", nargs="*", default=None, help="GroupedMatMul: TILE_BK_SUMS variants")
    parser.add_argument("--train", action="store_true", help="also time the GPT training step")
    parser.add_argument("--train-shapes", action="store_true",
                        help="the GPT training step's GEMMs (transposed operands) instead of SHAPES")
    args = parser.parse_args()
    cuda = torch_cuda()
    import torch

    if cuda is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
    shapes = ([parse_shape(s) for s in args.shapes] if args.shapes is not None
              else QUICK_SHAPES if args.quick else TRAIN_SHAPES if args.train_shapes else SHAPES)
    variants = VARIANTS if args.variants is None else args.variants
    out: dict[str, Any] = {"bench": "gemm", "torch_tf32": False, "shapes": []}
    for shape in shapes:
        out["shapes"].append(bench_shape(torch, cuda is not None, shape, variants, args.reps))
        save(out, args.json)
    if args.grouped is not None:
        out["grouped"] = bench_grouped_variants(args.grouped, args.quick)
        save(out, args.json)
    if args.train:
        out["train"] = bench_train_step(args.quick)
    emit(out, args.json)


if __name__ == "__main__":
    main()

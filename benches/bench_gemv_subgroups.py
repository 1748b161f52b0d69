"""Same-process A/B of the GGUF decode GEMV's cross-lane sum: subgroup shuffles vs workgroup memory.

``python3 benches/bench_gemv_subgroups.py --skeleton smol.skel --total-bytes 98362432 --json ab.json``
compiles the model once per side (``SIDES``: subgroups as by default, off, and on for every matrix
size; the choice is made at lowering), then times decode and prefill on each in alternating rounds
(``bench_peers.RlxpySide``, median of ``--reps`` each) and takes one decode token's breakdown of
each (``decode_breakdown``): per-dispatch GPU µs of each node (the GEMVs by name) and the whole
token's GPU time. The device must list wgpu's ``subgroup`` feature, else the sides would not differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_peers  # noqa: E402
from bench_peers import RlxpySide  # noqa: E402

#: side -> (quant_gguf.USE_SUBGROUPS, quant_gguf.SUBGROUP_MAX_ROWS); None keeps the default
SIDES = {"subgroups": (True, None), "workgroup_memory": (False, None), "subgroups_all_rows": (True, 1 << 40)}


def compile_sides(path: Path, chunk: int, reps: int) -> dict[str, Any]:
    from rlxpy.wgpu_backend.lowering import quant_gguf

    sides = {}
    default = quant_gguf.SUBGROUP_MAX_ROWS
    for name, (on, max_rows) in SIDES.items():
        quant_gguf.USE_SUBGROUPS, quant_gguf.SUBGROUP_MAX_ROWS = on, max_rows or default
        sides[name] = RlxpySide(path, chunk, reps)
    quant_gguf.USE_SUBGROUPS, quant_gguf.SUBGROUP_MAX_ROWS = True, default
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skeleton", required=True, help="a GGUF's first data_offset bytes")
    parser.add_argument("--total-bytes", type=int, required=True, help="the whole file's size")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="alternating measurement rounds")
    parser.add_argument("--quick", action="store_true", help="16-token prompt, 4 tokens, 1 rep (smoke run)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    chunk = 512
    if args.quick:
        bench_peers.PROMPT, bench_peers.TOKENS, args.reps, args.rounds, chunk = 16, 4, 1, 1, 16
    from bench_batched_decode import fill_skeleton

    from rlxpy.wgpu_backend.device import get_device

    dev = get_device()
    if "subgroup" not in dev.features:
        raise SystemExit(f"{dev.describe()} lacks the subgroup feature: nothing to compare")
    path = Path(fill_skeleton(args.skeleton, args.total_bytes))
    sides = compile_sides(path, chunk, args.reps)
    results: dict[str, Any] = {"device": dev.describe(), "rounds": {}}
    for r in range(args.rounds):
        for name, side in sides.items():
            got = side.measure()
            results["rounds"][f"{name}{r}"] = got
            print(f"round {r} {name:17} decode {got['decode_tps']:7.1f} tok/s  prefill "
                  f"{got['prefill_tps']:8.0f} tok/s  load+compile {got['load_compile_s']:.2f} s", flush=True)
    for name, side in sides.items():
        b = side.breakdown()
        results[f"breakdown_{name}"] = b
        print(f"{name:17} token GPU {b['token_gpu_ms']:.3f} ms, dispatches {b['dispatches']}", flush=True)
        for node, row in b["by_node"].items():  # lone µs of each node's dispatch (GEMVs by their names)
            print(f"    {node:40} x{row['dispatches']:<3} {row['us_each_median']:7.2f} us each", flush=True)
        for kernel, row in list(b["by_kernel"].items())[:6]:
            print(f"    kernel {kernel:32} x{row['dispatches']:<4} {row['us']:8.1f} us total", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()

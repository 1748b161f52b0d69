"""Element-wise bandwidth: rlxpy's unary, binary and cast kernels beside torch CUDA, as ratios.

Each case is one graph of a single element-wise node over n f32 elements (inputs are params, so a
run uploads nothing); its GPU time is the step's timestamp-query time, the median of --repeat
profiled runs. torch runs the same operation (relu, add, a float->int cast) and a plain copy_ of the
same bytes, timed with CUDA events. GB/s counts each element read and written once.
Each case runs twice in the same process: with the 16-byte kernels (elementwise_*_vec4, chosen when
the element count and offsets are multiples of 4) and forced onto the word-per-lane kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

import numpy as np
from common import cuda_time, emit, torch_cuda

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.wgpu_backend.lowering import elementwise
from rlxpy.wgpu_backend.profile import step_times_ms

CASES = {  # name: (build(g, x, y) -> node, bytes moved per element)
    "relu": (lambda g, x, y: g.activation(x, "relu", name="out"), 8),
    "add": (lambda g, x, y: g.add(x, y, name="out"), 12),
    "cast_i32": (lambda g, x, y: g.cast(x, DType.I32, name="out"), 8),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--sizes", default="8388608,67108864", help="comma-separated element counts")
    parser.add_argument("--repeat", type=int, default=15)
    return parser.parse_args()


def rlxpy_ms(case: str, n: int, repeat: int) -> tuple[float, float]:
    """(median GPU ms of the one step, max |error| against numpy)."""
    build, _ = CASES[case]
    g = rlxpy.Graph(case)
    x, y = g.param("x", [n]), g.param("y", [n])
    g.output(build(g, x, y))
    exe = rlxpy.compile(g)
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal(n, dtype=np.float32) * 100, rng.standard_normal(n, dtype=np.float32)
    exe.set_param("x", xs)
    exe.set_param("y", ys)
    want = {"relu": np.maximum(xs, 0), "add": xs + ys, "cast_i32": np.trunc(xs).astype(np.int32)}[case]
    error = float(np.max(np.abs(exe.run()["out"].astype(np.float64) - want)))
    times = []
    for _ in range(repeat):
        times.append(sum(step_times_ms(exe).values()))
    exe.destroy()
    return float(np.median(times)), error


@contextlib.contextmanager
def forced_words(on: bool) -> Iterator[None]:
    """With ``on``, lower as if no node qualified for the 16-byte kernels."""
    saved = elementwise._vec4_fields
    if on:
        elementwise._vec4_fields = lambda node, offsets: None
    try:
        yield
    finally:
        elementwise._vec4_fields = saved


def torch_ms(torch, case: str, n: int) -> tuple[float, float]:
    x = torch.randn(n, device="cuda")
    y, out, out_i = torch.randn_like(x), torch.empty_like(x), torch.empty(n, device="cuda", dtype=torch.int32)
    op = {"relu": lambda: torch.clamp(x, min=0, out=out),  # one kernel, like rlxpy's
          "add": lambda: torch.add(x, y, out=out), "cast_i32": lambda: out_i.copy_(x)}[case]
    return cuda_time(torch, op) * 1e3, cuda_time(torch, lambda: out.copy_(x)) * 1e3


def main() -> None:
    args = parse_args()
    torch = torch_cuda()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for case, (_, per) in CASES.items():
            row = {"case": case, "n": n}
            if torch is not None:
                row["torch_ms"], row["torch_copy_ms"] = torch_ms(torch, case, n)
            for access in ("vec4", "words"):
                with forced_words(access == "words"):
                    ms, err = rlxpy_ms(case, n, args.repeat)
                row[f"{access}_ms"], row[f"{access}_error"] = ms, err
                row[f"{access}_gbps"] = per * n / ms / 1e6
                if torch is not None:
                    row[f"{access}_vs_torch"] = row["torch_ms"] / ms
                    row[f"{access}_vs_copy"] = row["torch_copy_ms"] * per / 8 / ms
            rows.append(row)
            print(row, file=sys.stderr)
    emit({"elementwise": rows}, args.json)


if __name__ == "__main__":
    main()

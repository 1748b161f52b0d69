"""Matmul and element-wise throughput: rlxpy (WebGPU) beside torch CUDA, as ratios."""

from __future__ import annotations

import numpy as np
from common import cuda_time, emit, parse_args, timeit, torch_cuda

import rlxpy
from rlxpy import env


def matmul_graph(n: int) -> rlxpy.Graph:
    g = rlxpy.Graph(f"mm{n}")
    g.output(g.matmul(g.param("a", [n, n]), g.param("b", [n, n]), name="c"))
    return g


def elementwise_graph(n: int) -> rlxpy.Graph:
    g = rlxpy.Graph("ew")
    x = g.param("x", [n])
    g.output(g.add(g.mul(x, g.param("two", [n])), g.param("one", [n]), name="y"))
    return g


def time_dispatch(exe) -> float:
    with env.override(RLX_BENCH_DISPATCH_ONLY=1):
        return timeit(lambda: (exe.run(), exe.sync()), repeat=10, warmup=2)


def main() -> None:
    args = parse_args(__doc__)
    torch = torch_cuda()
    results: dict = {"matmul": [], "elementwise": []}
    for n in ([128, 256] if args.quick else [1024, 2048, 4096]):
        exe = rlxpy.compile(matmul_graph(n))
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        exe.set_param("a", a)
        exe.set_param("b", b)
        seconds = time_dispatch(exe)
        row = {"n": n, "rlxpy_tflops": 2 * n**3 / seconds / 1e12}
        if torch is not None:
            torch.backends.cuda.matmul.allow_tf32 = False
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            t = cuda_time(torch, lambda ta=ta, tb=tb: ta @ tb)
            row["torch_tflops"] = 2 * n**3 / t / 1e12
            row["ratio"] = row["rlxpy_tflops"] / row["torch_tflops"]
        results["matmul"].append(row)
        exe.destroy()
    n = (1 << 20) if args.quick else (64 << 20)  # elements: 256 MiB of f32 at full size
    exe = rlxpy.compile(elementwise_graph(n))
    for name, value in (("x", 1.0), ("two", 2.0), ("one", 1.0)):
        exe.set_param(name, np.full(n, value, np.float32))
    seconds = time_dispatch(exe)
    row = {"bytes": n * 4, "rlxpy_gbps": 4 * n * 4 / seconds / 1e9}  # 3 reads + 1 write
    if torch is not None:
        tx = torch.ones(n, device="cuda")
        t2, t1 = torch.full_like(tx, 2.0), torch.ones_like(tx)
        t = cuda_time(torch, lambda: torch.addcmul(t1, tx, t2))
        row["torch_gbps"] = 4 * n * 4 / t / 1e9
        row["ratio"] = row["rlxpy_gbps"] / row["torch_gbps"]
    results["elementwise"].append(row)
    emit(results, args.json)


if __name__ == "__main__":
    main()

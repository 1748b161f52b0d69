"""Host overhead per step: a 1,000-step graph of tiny element-wise ops, run repeatedly.

Reports µs per step for rlxpy (raw and wrapper encoding) and µs per op for torch CUDA eager on
the same chain (when CUDA is present), side by side.
"""

from __future__ import annotations

import numpy as np
from common import cuda_time, emit, parse_args, timeit, torch_cuda

import rlxpy
from rlxpy import env


def chain(steps: int, width: int) -> rlxpy.Graph:
    g = rlxpy.Graph("chain")
    x = g.input("x", [width])
    w = g.param("w", [width])
    for i in range(steps // 2):
        x = g.mul(g.add(x, w, name=f"a{i}"), w, name=f"m{i}")
    g.output(x)
    return g


def main() -> None:
    args = parse_args(__doc__)
    steps, width = (200 if args.quick else 1000), 256
    g = chain(steps, width)
    x = np.ones(width, np.float32)
    results = {"steps": steps}
    for raw in (1, 0):
        with env.override(RLX_WGPU_RAW_ENCODE=raw):
            exe = rlxpy.compile(g)
        exe.set_param("w", np.full(width, 0.5, np.float32))
        per_run = timeit(lambda exe=exe: exe.run({"x": x}), repeat=10)
        encode = exe.encoder
        with exe.flags.override(dispatch_only=1):
            dispatch_only = timeit(lambda exe=exe: (exe.run({"x": x}), exe.sync()), repeat=10)
        results["raw" if raw else "wrapper"] = {
            "run_ms": per_run * 1e3, "us_per_step": per_run / steps * 1e6,
            "dispatch_only_us_per_step": dispatch_only / steps * 1e6, "gpu_steps": encode.gpu_step_count()}
    torch = torch_cuda()
    if torch is not None:
        tx = torch.ones(width, device="cuda")
        tw = torch.full((width,), 0.5, device="cuda")

        def torch_chain():
            y = tx
            for _ in range(steps // 2):
                y = (y + tw) * tw
            return y

        t = cuda_time(torch, torch_chain)
        results["torch_cuda"] = {"run_ms": t * 1e3, "us_per_op": t / steps * 1e6}
        results["ratio_rlxpy_raw_over_torch"] = results["raw"]["run_ms"] / results["torch_cuda"]["run_ms"]
    emit(results, args.json)


if __name__ == "__main__":
    main()

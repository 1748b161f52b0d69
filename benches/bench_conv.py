"""CNN layers (issue 13) against torch, side by side: ResNet-18 and MobileNet-V3-like conv and pool
layers at 224 x 224, batch 1 and 32, and (when torchvision and the torch.compile front door can
take them) whole resnet18 / mobilenet_v3_small with random weights (``weights=None``).

Each layer is one rlxpy graph: the conv with its bias and ReLU folded into the kernel's epilogue
(the conv_epilogue pattern; torch runs conv2d + relu), or the pool. Every rlxpy result is checked
against torch first (max |diff| / max |torch|). Times are medians: rlxpy per run with dispatches only
(no readback) and, where the adapter has timestamp queries, the sum of its GPU step times; torch
CUDA eager with a synchronize (TF32 off, so both sides compute in f32). Without CUDA the torch side
runs on the CPU (a smoke run: the ratios then mean nothing). ``ratio`` = torch ms / rlxpy ms (> 1:
rlxpy is faster); ``tflops`` counts 2 * MACs of the conv.

One command: ``python benches/bench_conv.py [--quick] [--json out.json]``; ``--quick`` runs batch 1
at a quarter of the resolution with at most 64 channels, the models at 32 x 32, few repeats
(a lavapipe smoke run).
"""

from __future__ import annotations

import copy
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import cuda_time, emit, parse_args, timeit, torch_cuda

import rlxpy
from rlxpy.errors import RlxError, UnsupportedOpError
from rlxpy.wgpu_backend.profile import step_times_ms

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # cnn_models: the test networks

#: (name, c_in, c_out, size, kernel, stride, padding, groups) at a 224 x 224 input; size = input H = W
RESNET18 = [
    ("stem 7x7 s2", 3, 64, 224, 7, 2, 3, 1),
    ("layer1 3x3", 64, 64, 56, 3, 1, 1, 1),
    ("layer2 3x3 s2", 64, 128, 56, 3, 2, 1, 1),
    ("layer2 1x1 s2 down", 64, 128, 56, 1, 2, 0, 1),
    ("layer2 3x3", 128, 128, 28, 3, 1, 1, 1),
    ("layer3 3x3", 256, 256, 14, 3, 1, 1, 1),
    ("layer4 3x3", 512, 512, 7, 3, 1, 1, 1),
]
MOBILENET = [
    ("stem 3x3 s2", 3, 16, 224, 3, 2, 1, 1),
    ("dw 3x3 s2 c16", 16, 16, 112, 3, 2, 1, 16),
    ("pw 1x1 16->72", 16, 72, 56, 1, 1, 0, 1),
    ("dw 5x5 s2 c96", 96, 96, 28, 5, 2, 2, 96),
    ("pw 1x1 96->576", 96, 576, 7, 1, 1, 0, 1),
    ("dw 5x5 c576", 576, 576, 7, 5, 1, 2, 576),
]
#: (name, kind, channels, size, kernel, stride, padding)
POOLS = [
    ("resnet maxpool 3x3 s2", "max", 64, 112, 3, 2, 1),
    ("resnet global avg", "global", 512, 7, 0, 0, 0),
    ("mobilenet SE global avg", "global", 576, 7, 0, 0, 0),
]


def quick_layers(layers: list[tuple]) -> list[tuple]:
    """--quick: a quarter of the resolution and at most 64 channels (groups kept depthwise)."""
    out = []
    for name, c_in, c_out, size, k, s, p, groups in layers:
        c_in2, c_out2 = min(c_in, 64), min(c_out, 64)
        out.append((name, c_in2, c_out2, max(size // 4, k), k, s, p, c_in2 if groups == c_in else groups))
    return out


class Side:
    """Where torch runs: CUDA when present (timed with a synchronize), else the CPU."""

    def __init__(self) -> None:
        import torch

        self.cuda = torch_cuda()
        self.torch = torch
        self.device = "cuda" if self.cuda is not None else "cpu"
        if self.cuda is not None:
            torch.backends.cudnn.allow_tf32 = False  # f32 convs on both sides
            torch.backends.cuda.matmul.allow_tf32 = False

    def tensor(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def time_ms(self, fn: Callable[[], Any], repeat: int) -> float:
        with self.torch.no_grad():
            if self.cuda is not None:
                return 1e3 * cuda_time(self.cuda, fn, repeat=repeat)
            return 1e3 * timeit(fn, repeat=repeat, warmup=1)


def rlxpy_ms(exe, feeds: dict[str, np.ndarray], repeat: int) -> dict[str, Any]:
    """Median ms per run (dispatches only, one wait per run) and the GPU step times when measurable."""
    exe.run(feeds)
    times = []
    with exe.flags.override(dispatch_only=1):
        for _ in range(repeat):
            started = time.perf_counter()
            exe.run(feeds)
            exe.sync()
            times.append(time.perf_counter() - started)
        try:
            steps = step_times_ms(exe)
        except UnsupportedOpError:  # no timestamp queries on this adapter
            steps = {}
    return {"ms": 1e3 * statistics.median(times), "gpu_ms": sum(steps.values()) if steps else None,
            "steps": [s.kernel or s.kind for s in exe.schedule.steps]}


def rel_error(got: np.ndarray, want) -> float:
    want = want.detach().double().cpu().numpy()
    return float(np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() or 1.0))


def bench_conv(side: Side, layer: tuple, batch: int, repeat: int) -> dict[str, Any]:
    name, c_in, c_out, size, k, stride, pad, groups = layer
    r = np.random.default_rng(0)
    x = r.standard_normal((batch, c_in, size, size), dtype=np.float32)
    fan_in = c_in // groups * k * k
    w = (r.standard_normal((c_out, c_in // groups, k, k)) / math.sqrt(fan_in)).astype(np.float32)
    b = r.standard_normal(c_out).astype(np.float32)
    g = rlxpy.Graph("conv")
    y = g.conv(g.input("x", x.shape), g.param("w", w.shape), stride, pad, 1, groups)
    g.output(g.relu(g.add(y, g.param("b", (1, c_out, 1, 1))), name="y"))
    exe = rlxpy.compile(g)
    exe.set_param("w", w)
    exe.set_param("b", b.reshape(1, c_out, 1, 1))
    got = exe.run({"x": x})["y"]
    tx, tw, tb = side.tensor(x), side.tensor(w), side.tensor(b)
    fn = side.torch.nn.functional

    def torch_layer():
        return side.torch.relu(fn.conv2d(tx, tw, tb, stride, pad, 1, groups))

    with side.torch.no_grad():
        want = fn.conv2d(tx.double(), tw.double(), tb.double(), stride, pad, 1, groups).relu()
    ours = rlxpy_ms(exe, {"x": x}, repeat)
    torch_ms = side.time_ms(torch_layer, repeat)
    out = got.shape[2] * got.shape[3]
    flops = 2 * batch * c_out * out * fan_in
    exe.destroy()
    return {"layer": name, "batch": batch, "shape": [c_in, c_out, size, k, stride, pad, groups],
            "rlxpy": ours, "torch_ms": torch_ms, "ratio": torch_ms / ours["ms"],
            "tflops": flops / ours["ms"] / 1e9, "rel_error": rel_error(got, want)}


def bench_pool(side: Side, pool: tuple, batch: int, repeat: int) -> dict[str, Any]:
    name, kind, channels, size, k, stride, pad = pool
    x = np.random.default_rng(1).standard_normal((batch, channels, size, size), dtype=np.float32)
    g = rlxpy.Graph("pool")
    xin = g.input("x", x.shape)
    g.output(g.global_avg_pool(xin, name="y") if kind == "global" else g.max_pool(xin, k, stride, pad,
                                                                                  name="y"))
    exe = rlxpy.compile(g)
    got = exe.run({"x": x})["y"]
    tx = side.tensor(x)
    fn = side.torch.nn.functional

    def torch_pool():
        return fn.adaptive_avg_pool2d(tx, 1) if kind == "global" else fn.max_pool2d(tx, k, stride, pad)

    with side.torch.no_grad():
        want = torch_pool()
    ours = rlxpy_ms(exe, {"x": x}, repeat)
    torch_ms = side.time_ms(torch_pool, repeat)
    exe.destroy()
    return {"layer": name, "batch": batch, "rlxpy": ours, "torch_ms": torch_ms,
            "ratio": torch_ms / ours["ms"], "rel_error": rel_error(got, want)}


def bench_models(side: Side, batches: list[int], size: int, repeat: int) -> dict[str, Any]:
    """Whole resnet18 / mobilenet_v3_small (torchvision's with weights=None when it imports, else
    tests/cnn_models.py's layer-for-layer copies) through torch.compile(backend=rlxpy)."""
    try:
        from cnn_models import build, torchvision_models

        from rlxpy.frontends.torch_fx import make_backend
    except ImportError as e:
        return {"skipped": f"no torch.compile front door or model builder: {e}"}
    torch = side.torch
    source = "torchvision" if torchvision_models() is not None else "tests/cnn_models.py"
    results: dict[str, Any] = {"models_from": source}
    for name in ("resnet18", "mobilenet_v3_small"):
        model = build(name)
        for batch in batches:
            key = f"{name} batch {batch}"
            x = torch.randn(batch, 3, size, size)
            try:
                compiled = torch.compile(model, backend=make_backend(on_unsupported="error"), dynamic=False)
                with torch.no_grad():
                    got = compiled(x)
                    want = copy.deepcopy(model).double()(x.double())
                    ours_ms = 1e3 * timeit(lambda c=compiled, x=x: c(x), repeat=repeat, warmup=1)
            except (RlxError, Exception) as e:  # noqa: BLE001  (dynamo wraps the backend's errors)
                results[key] = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
                torch.compiler.reset()
                continue
            device_model = model.to(side.device)
            tx = x.to(side.device)
            torch_ms = side.time_ms(lambda m=device_model, t=tx: m(t), repeat)
            model.cpu()
            err = float((got.double() - want).abs().max() / want.abs().max())
            results[key] = {"rlxpy_ms": ours_ms, "torch_ms": torch_ms, "ratio": torch_ms / ours_ms,
                            "rel_error": err, "note": "rlxpy: per call (input upload and readback included)"}
            torch.compiler.reset()
    return results


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    side = Side()
    quick = args.quick
    batches = [1] if quick else [1, 32]
    repeat = 3 if quick else 20
    resnet, mobilenet = (quick_layers(RESNET18), quick_layers(MOBILENET)) if quick else (RESNET18, MOBILENET)
    pools = POOLS
    if quick:
        pools = [(n, kind, min(c, 64), max(s // 4, 3), k, st, p) for n, kind, c, s, k, st, p in POOLS]
    results: dict[str, Any] = {"torch_device": side.device, "quick": quick, "layers": []}
    for batch in batches:
        for layer in resnet + mobilenet:
            results["layers"].append(bench_conv(side, layer, batch, repeat))
            print(f"{layer[0]:>22} b{batch}: ratio {results['layers'][-1]['ratio']:.2f}", flush=True)
        for pool in pools:
            results["layers"].append(bench_pool(side, pool, batch, repeat))
    results["models"] = bench_models(side, batches, 32 if quick else 224, repeat)
    emit(results, args.json)


if __name__ == "__main__":
    main()

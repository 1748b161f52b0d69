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
(a lavapipe smoke run). ``--batches``, ``--layers`` (name substrings), ``--no-pools`` and
``--no-models`` narrow a run; ``--variants`` compiles each conv layer again under forced lowering
choices and reports their GPU times beside the default's (a tile and split sweep), e.g.
``--variants "r64:conv_gemm.FORCE_ROWS=64" "s4:conv_gemm.FORCE_SPLITS=4"``.
``gpu_ms`` is the median over ``--gpu-reps`` replays of the sum of the layer's step times.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import cuda_time, emit, timeit, torch_cuda

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
    ("layer3 3x3 s2", 128, 256, 28, 3, 2, 1, 1),
    ("layer3 1x1 s2 down", 128, 256, 28, 1, 2, 0, 1),
    ("layer3 3x3", 256, 256, 14, 3, 1, 1, 1),
    ("layer4 3x3 s2", 256, 512, 14, 3, 2, 1, 1),
    ("layer4 3x3", 512, 512, 7, 3, 1, 1, 1),
]
MOBILENET = [
    ("stem 3x3 s2", 3, 16, 224, 3, 2, 1, 1),
    ("dw 3x3 s2 c16", 16, 16, 112, 3, 2, 1, 16),
    ("pw 1x1 16->72", 16, 72, 56, 1, 1, 0, 1),
    ("pw 1x1 72->24", 72, 24, 28, 1, 1, 0, 1),
    ("dw 5x5 s2 c96", 96, 96, 28, 5, 2, 2, 96),
    ("pw 1x1 40->240", 40, 240, 14, 1, 1, 0, 1),
    ("pw 1x1 240->40", 240, 40, 14, 1, 1, 0, 1),
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


def gpu_times(exe, reps: int) -> dict[str, Any]:
    """The median over ``reps`` replays of the summed GPU step times, and each step's median."""
    try:
        runs = [step_times_ms(exe) for _ in range(reps)]
    except UnsupportedOpError:  # no timestamp queries on this adapter
        return {"gpu_ms": None}
    kernels = [s.kernel or s.kind for s in exe.schedule.steps]
    per_step = {i: statistics.median(run.get(i, 0.0) for run in runs) for i in range(len(kernels))}
    steps = [[kernels[i], round(ms, 4), list(exe.schedule.steps[i].grid)] for i, ms in per_step.items()]
    return {"gpu_ms": statistics.median(sum(run.values()) for run in runs), "gpu_steps": steps}


def rlxpy_ms(exe, feeds: dict[str, np.ndarray], repeat: int, gpu_reps: int = 5) -> dict[str, Any]:
    """Median ms per run (dispatches only, one wait per run; the same input each run, so the host
    compares it with the last one instead of uploading it) and the GPU step times when measurable."""
    exe.run(feeds)
    times = []
    with exe.flags.override(dispatch_only=1):
        for _ in range(repeat):
            started = time.perf_counter()
            exe.run(feeds)
            exe.sync()
            times.append(time.perf_counter() - started)
        gpu = gpu_times(exe, gpu_reps)
    kernels = [s.kernel or s.kind for s in exe.schedule.steps]
    return {"ms": 1e3 * statistics.median(times), **gpu, "steps": kernels}


class Variant:
    """Forced lowering choices, ``module.NAME=value`` pairs (modules of rlxpy.wgpu_backend.lowering),
    set while a layer compiles."""

    def __init__(self, spec: str) -> None:
        self.name, _, sets = spec.partition(":")
        self.sets = []
        for item in filter(None, sets.split(",")):
            target, _, value = item.partition("=")
            module, _, attr = target.rpartition(".")
            parsed: Any = None if value == "None" else int(value) if value.lstrip("-").isdigit() else value
            self.sets.append((module, attr, parsed))

    def __enter__(self) -> Variant:
        import importlib

        self.saved = []
        for module, attr, value in self.sets:
            mod = importlib.import_module(f"rlxpy.wgpu_backend.lowering.{module}")
            self.saved.append((mod, attr, getattr(mod, attr, None)))
            setattr(mod, attr, value)
        return self

    def __exit__(self, *exc: object) -> None:
        for mod, attr, value in reversed(self.saved):
            setattr(mod, attr, value)


def rel_error(got: np.ndarray, want) -> float:
    want = want.detach().double().cpu().numpy()
    return float(np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() or 1.0))


def bench_conv(side: Side, layer: tuple, batch: int, repeat: int, variants: list[Variant] = (),
               gpu_reps: int = 5) -> dict[str, Any]:
    name, c_in, c_out, size, k, stride, pad, groups = layer
    r = np.random.default_rng(0)
    x = r.standard_normal((batch, c_in, size, size), dtype=np.float32)
    fan_in = c_in // groups * k * k
    w = (r.standard_normal((c_out, c_in // groups, k, k)) / math.sqrt(fan_in)).astype(np.float32)
    b = r.standard_normal(c_out).astype(np.float32)
    g = rlxpy.Graph("conv")
    y = g.conv(g.input("x", x.shape), g.param("w", w.shape), stride, pad, 1, groups)
    g.output(g.relu(g.add(y, g.param("b", (1, c_out, 1, 1))), name="y"))

    def build():
        exe = rlxpy.compile(g)
        exe.set_param("w", w)
        exe.set_param("b", b.reshape(1, c_out, 1, 1))
        return exe

    exe = build()
    got = exe.run({"x": x})["y"]
    tx, tw, tb = side.tensor(x), side.tensor(w), side.tensor(b)
    fn = side.torch.nn.functional

    def torch_layer():
        return side.torch.relu(fn.conv2d(tx, tw, tb, stride, pad, 1, groups))

    with side.torch.no_grad():
        want = fn.conv2d(tx.double(), tw.double(), tb.double(), stride, pad, 1, groups).relu()
    ours = rlxpy_ms(exe, {"x": x}, repeat, gpu_reps)
    torch_ms = side.time_ms(torch_layer, repeat)
    out = got.shape[2] * got.shape[3]
    flops = 2 * batch * c_out * out * fan_in
    exe.destroy()
    row = {"layer": name, "batch": batch, "shape": [c_in, c_out, size, k, stride, pad, groups],
           "rlxpy": ours, "torch_ms": torch_ms, "ratio": torch_ms / ours["ms"],
           "tflops": flops / ours["ms"] / 1e9, "rel_error": rel_error(got, want)}
    if ours.get("gpu_ms"):
        row["gpu_tflops"] = flops / ours["gpu_ms"] / 1e9
        row["torch_over_gpu"] = torch_ms / ours["gpu_ms"]
    for variant in variants:
        try:
            with variant:
                vexe = build()
            vgot = vexe.run({"x": x})["y"]
            timed = gpu_times(vexe, gpu_reps)
            vexe.destroy()
            row.setdefault("variants", {})[variant.name] = {
                **timed, "rel_error": rel_error(vgot, want),
                "gpu_tflops": flops / timed["gpu_ms"] / 1e9 if timed.get("gpu_ms") else None}
        except Exception as e:  # noqa: BLE001  (a forced choice the layer cannot take is reported)
            row.setdefault("variants", {})[variant.name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return row


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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--quick", action="store_true", help="small sizes (lavapipe smoke run)")
    parser.add_argument("--batches", type=int, nargs="*", help="default 1 32 (--quick: 1)")
    parser.add_argument("--layers", nargs="*", help="only layers whose name holds one of these")
    parser.add_argument("--variants", nargs="*", default=[], help="name:module.NAME=value,... (see above)")
    parser.add_argument("--no-pools", action="store_true")
    parser.add_argument("--no-models", action="store_true")
    parser.add_argument("--repeat", type=int, help="timed runs per case (default 20, --quick 3)")
    parser.add_argument("--gpu-reps", type=int, default=5, help="replays for the GPU step times")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    side = Side()
    quick = args.quick
    batches = args.batches or ([1] if quick else [1, 32])
    repeat = args.repeat or (3 if quick else 20)
    resnet, mobilenet = (quick_layers(RESNET18), quick_layers(MOBILENET)) if quick else (RESNET18, MOBILENET)
    pools = POOLS
    if quick:
        pools = [(n, kind, min(c, 64), max(s // 4, 3), k, st, p) for n, kind, c, s, k, st, p in POOLS]
    wanted = (lambda name: any(part in name for part in args.layers)) if args.layers else (lambda name: True)
    variants = [Variant(spec) for spec in args.variants]
    results: dict[str, Any] = {"torch_device": side.device, "quick": quick, "layers": []}
    for batch in batches:
        for layer in [lay for lay in resnet + mobilenet if wanted(lay[0])]:
            results["layers"].append(bench_conv(side, layer, batch, repeat, variants, args.gpu_reps))
            row = results["layers"][-1]
            line = " ".join(f"{k}={v['gpu_ms']:.4f}" for k, v in row.get("variants", {}).items()
                            if isinstance(v.get("gpu_ms"), float))
            print(f"{layer[0]:>22} b{batch}: gpu {row['rlxpy'].get('gpu_ms') or float('nan'):.4f} ms "
                  f"torch {row['torch_ms']:.4f} ms {line}", flush=True)
        for pool in [] if args.no_pools else [pl for pl in pools if wanted(pl[0])]:
            results["layers"].append(bench_pool(side, pool, batch, repeat))
    if not args.no_models:
        results["models"] = bench_models(side, batches, 32 if quick else 224, repeat)
    emit(results, args.json)


if __name__ == "__main__":
    main()

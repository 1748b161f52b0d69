"""CNN inference latency: resnet18 and mobilenet_v3_small (weights=None, seeded) at batch 1 and 32 on
224 x 224 images, rlxpy through its ONNX import and through torch.compile(backend="rlxpy"), against
torch CUDA eager and ONNX Runtime (its WebGPU, CUDA and CPU execution providers, whichever are
installed), in one command:

    python benches/bench_cnn.py --json cnn.json            # on the GPU machine
    python benches/bench_cnn.py --quick                    # lavapipe smoke run (64 x 64, batch 1 and 2)

Every figure is the median wall time of one call, input in and logits out included (torch CUDA:
the input already on the GPU, synchronised). Each rlxpy path is first checked against eager torch
(max error relative to the largest logit). Ratios are rlxpy's time over the other's (below 1: rlxpy
is faster). Models come from tests/cnn_models.py (torchvision's when it imports).

torch's convolution precision is left at torch's default, which lets cuDNN use TF32 tensor cores for
convolutions (``torch.backends.cudnn.allow_tf32`` is True unless changed; the rows record both flags).
``--torch-f32`` adds a second torch CUDA column with TF32 off (both sides then compute in f32).

``rlxpy_resident_late_ms`` times the resident run again after the other rlxpy timings (the GPU's
clocks and the host's state move between the two; both are kept).
``rlxpy_pipelined_ms`` (with ``--resident``): each resident run submitted before the last is read, the
time per run of a stream of runs (a diagnostic: on an H100, 2026-11-26, it came out at or above the
one-call figure, 3.96-4.63 against 3.94-3.97 ms for resnet18 at batch 32, so the one-call latency is
not what keeps rlxpy's time above its GPU profile).
The same-footing columns (``--resident``): torch's input is already on the GPU, so rlxpy is also
timed with its input already in the arena (``exe.run(feeds={"x": exe.handle("x")})``: a GPU copy,
no host upload and no host-side comparison with the last input), logits still read back; the host
input path is then split into the run's input checks, wgpu's write_buffer alone, and the write waited
for on the GPU (``upload_breakdown``).
``--profile`` adds rlxpy's GPU time by kernel and its slowest steps (one timestamped pass per step,
``exe.profile``: ranks steps, slightly overcounts a run) for the ONNX path.
``--variants`` compiles the ONNX graph again under forced lowering choices (bench_conv.py's
``name:module.NAME=value,...``) and times each resident (with its profile under ``--profile``) beside
the default, e.g. ``--variants "f2:conv_winograd.FORCE_TILE=2"``.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_conv import Variant  # noqa: E402
from cnn_models import build  # noqa: E402
from common import timeit  # noqa: E402

from benches.common import emit  # noqa: E402
from rlxpy.frontends.onnx import OnnxModel  # noqa: E402
from rlxpy.frontends.torch_fx import make_backend  # noqa: E402

MODELS = ("resnet18", "mobilenet_v3_small")
ORT_PROVIDERS = ("WebGpuExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--quick", action="store_true", help="64 x 64, batches 1 and 2, 2 repeats (lavapipe)")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--batches", type=int, nargs="*", help="default 1 32 (--quick: 1 2)")
    parser.add_argument("--size", type=int, help="image side (default 224, --quick 64)")
    parser.add_argument("--repeat", type=int, help="timed calls per case (default 20, --quick 2)")
    parser.add_argument("--resident", action="store_true",
                        help="also time rlxpy with its input already on the GPU (like torch's)")
    parser.add_argument("--profile", action="store_true", help="rlxpy GPU ms by kernel and slowest steps")
    parser.add_argument("--torch-f32", action="store_true", help="also time torch CUDA with TF32 off")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile path")
    parser.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime")
    parser.add_argument("--variants", nargs="*", default=[], help="name:module.NAME=value,...")
    return parser.parse_args()


def median_ms(fn: Any, repeat: int, warmup: int, sync: Any = None) -> float:
    return 1000 * timeit(fn, repeat, warmup, sync)


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def export_onnx(model: torch.nn.Module, x: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buffer, opset_version=17, dynamo=False, input_names=["x"],
                          output_names=["logits"])
    return buffer.getvalue()


def ort_times(onnx_bytes: bytes, x: np.ndarray, want: np.ndarray, repeat: int, warmup: int) -> dict[str, Any]:
    """ONNX Runtime per installed execution provider: ms and relative error, or why it did not run."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {"onnxruntime": "not installed"}
    out: dict[str, Any] = {}
    available = ort.get_available_providers()
    for provider in ORT_PROVIDERS:
        key = f"ort_{provider.removesuffix('ExecutionProvider').lower()}"
        if provider not in available:
            continue
        try:
            session = ort.InferenceSession(onnx_bytes, providers=[provider])
            error = relative_error(session.run(None, {"x": x})[0], want)
            out[f"{key}_ms"] = median_ms(lambda s=session: s.run(None, {"x": x}), repeat, warmup)
            out[f"{key}_error"] = error
        except Exception as e:  # noqa: BLE001  (a provider that cannot take the model is reported)
            out[f"{key}_error"] = f"{type(e).__name__}: {e}"
    return out


def torch_cuda_ms(model: torch.nn.Module, x: torch.Tensor, repeat: int, warmup: int,
                  tf32: bool | None = None) -> float | None:
    """torch CUDA eager ms, input already on the GPU; ``tf32`` None keeps torch's settings as they are."""
    if not torch.cuda.is_available():
        return None
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    if tf32 is not None:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        gpu_model, gpu_x = model.to("cuda"), x.to("cuda")
        with torch.no_grad():
            ms = median_ms(lambda: gpu_model(gpu_x), repeat, warmup, torch.cuda.synchronize)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
        model.to("cpu")
    return ms


def rlxpy_resident(onnx_bytes: bytes, x: np.ndarray, want: np.ndarray, repeat: int, warmup: int,
                   profile: bool) -> dict[str, Any]:
    """The ONNX graph compiled here (the same import OnnxModel.run does), timed with its input already
    in the arena, and optionally profiled: GPU ms by kernel and the slowest steps."""
    import rlxpy

    imported = OnnxModel(onnx_bytes).import_graph({"x": x.shape})
    exe = rlxpy.compile(imported.graph)
    for name, value in imported.params.items():
        exe.set_param(name, value)
    logits = imported.outputs["logits"]
    out: dict[str, Any] = {"rlxpy_steps": len(exe.schedule.steps),
                           "rlxpy_host_steps": exe.report().summary["host_steps"]}
    out["rlxpy_resident_error"] = relative_error(exe.run({"x": x})[logits], want)
    feeds = {"x": exe.handle("x")}
    out["rlxpy_resident_ms"] = median_ms(lambda: exe.run(feeds=feeds), repeat, warmup)
    out["rlxpy_pipelined_ms"] = pipelined_ms(exe, feeds, repeat)
    out["rlxpy_host_input_ms"] = median_ms(lambda: exe.run({"x": x}), repeat, warmup)  # same input each call
    out.update(upload_breakdown(exe, x, repeat, warmup))
    out["rlxpy_resident_late_ms"] = median_ms(lambda: exe.run(feeds=feeds), repeat, warmup)  # timed again
    if profile:
        prof = exe.profile({"x": x})
        kernels = prof.by_kernel()
        out["rlxpy_profile_gpu_ms"] = round(sum(g["ms"] for g in kernels), 4)
        out["rlxpy_gpu_ms_by_kernel"] = {g["key"]: [g["steps"], round(g["ms"], 4)] for g in kernels}
        rows = sorted(prof.rows, key=lambda r: -r.get("gpu_ms", 0.0))[:40]
        out["rlxpy_slowest_steps"] = [[r["kernel"], r["node"][-48:], r["out_shape"], str(r["grid"]),
                                       round(r.get("gpu_ms", 0.0), 4)] for r in rows]
    exe.destroy()
    return out


def pipelined_ms(exe: Any, feeds: dict[str, Any], repeat: int) -> float:
    """ms per run when each run is submitted before the last one is read (the GPU never waits for the
    host's readback): the GPU-bound time per run, against the one-call latency of rlxpy_resident_ms."""
    pending = exe.submit(feeds=feeds)
    pending()
    started = time.perf_counter()
    pending = exe.submit(feeds=feeds)
    for _ in range(repeat - 1):
        following = exe.submit(feeds=feeds)
        pending()
        pending = following
    pending()
    return 1000 * (time.perf_counter() - started) / repeat


def upload_breakdown(exe: Any, x: np.ndarray, repeat: int, warmup: int) -> dict[str, float]:
    """Where the host input path's time goes: the input checks and storage conversion a run does
    (``_validate_inputs``), wgpu's write_buffer of the bytes alone (its host copy into staging), and
    the write waited for on the GPU (staging copy into the arena, then a 4-byte read)."""
    flat = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    offset = exe.schedule.node_offset(exe.graph["x"].id)

    def write() -> None:
        exe.arena.write(offset, memoryview(flat))

    return {"rlxpy_input_checks_ms": median_ms(lambda: exe._validate_inputs({"x": x}), repeat, warmup),
            "rlxpy_write_buffer_ms": median_ms(write, repeat, warmup),
            "rlxpy_write_buffer_synced_ms": median_ms(write, repeat, warmup, exe.sync)}


def bench_case(name: str, batch: int, size: int, repeat: int, warmup: int,
               args: argparse.Namespace) -> dict[str, Any]:
    model = build(name)
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        want = model(x).numpy()
    row: dict[str, Any] = {"model": name, "batch": batch, "size": size}
    onnx_bytes = export_onnx(model, x)
    imported = OnnxModel(onnx_bytes)
    feeds = {"x": x.numpy()}
    started = time.perf_counter()
    row["rlxpy_onnx_error"] = relative_error(imported.run(feeds)["logits"], want)
    row["rlxpy_onnx_first_call_s"] = time.perf_counter() - started  # import + compile + upload + run
    row["rlxpy_onnx_ms"] = median_ms(lambda: imported.run(feeds), repeat, warmup)
    if args.resident or args.profile:
        row.update(rlxpy_resident(onnx_bytes, x.numpy(), want, repeat, warmup, args.profile))
    for spec in args.variants:
        variant = Variant(spec)
        with variant:
            row.setdefault("variants", {})[variant.name] = rlxpy_resident(
                onnx_bytes, x.numpy(), want, repeat, warmup, args.profile)
    if not args.no_compile:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=make_backend("error"))
        with torch.no_grad():
            row["rlxpy_compile_error"] = relative_error(compiled(x).numpy(), want)
            row["rlxpy_compile_ms"] = median_ms(lambda: compiled(x), repeat, warmup)
            row["torch_cpu_eager_ms"] = median_ms(lambda: model(x), repeat, warmup)
        del compiled
        torch._dynamo.reset()
    row["torch_cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
    row["torch_matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    row["torch_cuda_eager_ms"] = torch_cuda_ms(model, x, repeat, warmup)
    if args.torch_f32:
        row["torch_cuda_f32_ms"] = torch_cuda_ms(model, x, repeat, warmup, tf32=False)
    if not args.no_ort:
        row.update(ort_times(onnx_bytes, x.numpy(), want, repeat, warmup))
    for ours in ("rlxpy_onnx_ms", "rlxpy_compile_ms", "rlxpy_resident_ms"):
        if ours not in row:
            continue
        for other in [k for k in row if k.endswith("_ms") and not k.startswith("rlxpy")]:
            if isinstance(row[other], float) and row[other] > 0:
                row[f"{ours.removesuffix('_ms')}_over_{other.removesuffix('_ms')}"] = row[ours] / row[other]
    print(row, file=sys.stderr)
    return row


def main() -> None:
    args = parse_args()
    batches = args.batches or ([1, 2] if args.quick else [1, 32])
    size = args.size or (64 if args.quick else 224)
    repeat = args.repeat or (2 if args.quick else 20)
    warmup = 1 if args.quick else 3
    rows = [bench_case(name, batch, size, repeat, warmup, args) for name in args.models for batch in batches]
    emit({"bench": "cnn", "torch": torch.__version__, "cuda": torch.cuda.is_available(), "rows": rows},
         args.json)


if __name__ == "__main__":
    main()

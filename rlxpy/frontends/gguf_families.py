"""What each GGUF architecture adds to the llama layout: its switches of the shared transformer
builder (:class:`rlxpy.models.transformer.Features`) and the tensors a layer reads.

Values the file does not hold are llama.cpp's for the same architecture (which transformers'
GGUF loader also assumes): Gemma's sliding-window pattern (every 2nd layer global in gemma2, every
6th in gemma3), the 10000 RoPE base of gemma3's sliding layers, the attention scale, gemma2's
softcaps; the family tests check the result against
transformers loading the same file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlxpy.models.transformer import Features

#: llama.cpp permutes the Q/K rows of these for adjacent-pair RoPE (rope_interleaved).
LLAMA_LIKE = ("llama", "mistral", "granite")
#: Every architecture load_gguf accepts.
SUPPORTED = (*LLAMA_LIKE, "gemma2", "gemma3", "qwen2", "qwen3", "phi3")
#: Gemma 2 / 3: layer i is global when (i + 1) % pattern == 0 (llama.cpp's set_swa_pattern, transformers'
#: layer_types): gemma2 alternates, gemma3 has one global layer in 6.
GEMMA_SLIDING_PATTERN = {"gemma2": 2, "gemma3": 6}
#: the RoPE base of gemma3's sliding layers when the file names none (gemma2 uses one base).
GEMMA3_LOCAL_ROPE_BASE = 10000.0
#: llama.cpp scales the 27B models' scores by (hidden / heads) ** -0.5, the others' by head size ** -0.5.
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}
#: softcaps when the file names none: llama.cpp's gemma2 defaults (gemma3 has none).
GEMMA_SOFTCAPS = {"gemma2": (50.0, 30.0), "gemma3": (0.0, 0.0)}


@dataclass(frozen=True)
class Family:
    """How one architecture's file maps onto the shared builder."""

    features: Features
    interleaved_rope: bool
    #: phi3: q|k|v may be one ``attn_qkv`` tensor, and ``ffn_up`` holds gate|up ([hidden, 2 * ffn]).
    packed: bool = False


def family(meta: Any, arch: str, hidden: int, heads: int, head_dim: int, layers: int,
           tensors: dict[str, Any]) -> Family:
    """The family of ``arch`` with the switches its metadata and tensors give (``meta``: gguf._Meta)."""
    if arch in LLAMA_LIKE:
        # a window in the file (Mistral 7B v0.1's 4096) slides every layer, as transformers' Mistral does
        window = meta.integer("attention.sliding_window", 1, 2**31 - 1, default=0) \
            if meta.has("attention.sliding_window") else 0
        return Family(Features(sliding_window=window), interleaved_rope=True)
    if arch == "qwen2":
        return Family(Features(qkv_bias=True), interleaved_rope=False)
    if arch == "qwen3":
        return Family(Features(qk_norm=True), interleaved_rope=False)
    if arch == "phi3":
        for name in ("rope_factors_long.weight", "rope_factors_short.weight"):
            if name in tensors:
                raise meta.fail(f"tensor {name!r}: LongRoPE (phi3's 128k-context scaling) is not supported")
        return Family(Features(), interleaved_rope=False, packed=True)
    if arch in GEMMA_SLIDING_PATTERN:
        return Family(_gemma(meta, arch, hidden, heads, head_dim, layers), interleaved_rope=False)
    raise meta.fail(f"architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED)})")


def _gemma(meta: Any, arch: str, hidden: int, heads: int, head_dim: int, layers: int) -> Features:
    scaling = meta.layout.meta.get(meta.key("rope.scaling.type"))
    kind = "linear" if scaling is None else scaling.value
    factor = meta.positive_float("rope.scaling.factor", 1.0)
    if kind != "none" and factor != 1.0:
        raise meta.fail(f"metadata {meta.key('rope.scaling.factor')!r}: RoPE scaling ({kind}, factor "
                        f"{factor:g}) is not supported for {arch}")
    window = meta.integer("attention.sliding_window", 1, 2**31 - 1)
    scalar = hidden / heads if layers == GEMMA_27B_LAYERS[arch] else head_dim
    pattern = GEMMA_SLIDING_PATTERN[arch]
    attn_cap, final_cap = GEMMA_SOFTCAPS[arch]
    return Features(
        qk_norm=arch == "gemma3",
        post_norms=True,
        gate_act="gelu_tanh",
        # transformers multiplies by the f32 tensor sqrt(hidden)
        embed_scale=float(np.float32(math.sqrt(hidden))),
        attn_scale=scalar ** -0.5,
        attn_softcap=meta.positive_float("attn_logit_softcapping", attn_cap),
        final_softcap=meta.positive_float("final_logit_softcapping", final_cap),
        sliding_window=window,
        sliding_layers=tuple((i + 1) % pattern != 0 for i in range(layers)),
        rope_theta_local=meta.positive_float("rope.freq_base_swa", GEMMA3_LOCAL_ROPE_BASE) if arch == "gemma3"
        else 0.0,
    )


def layer_tensors(fam: Family, hidden: int, q_width: int, kv_width: int, head_dim: int, ffn: int,
                  packed_qkv: bool) -> dict[str, tuple[tuple[int, ...], str]]:
    """Per-layer tensor part -> (dims in GGUF order, what they mean) for ``blk.{i}.{part}``."""
    f = fam.features
    shapes: dict[str, tuple[tuple[int, ...], str]] = {
        "attn_norm.weight": ((hidden,), "[hidden]"),
        "ffn_norm.weight": ((hidden,), "[hidden]"),
    }
    if packed_qkv:
        shapes["attn_qkv.weight"] = ((hidden, q_width + 2 * kv_width),
                                     "[hidden, (heads + 2 kv heads) × head size]")
    else:
        shapes["attn_q.weight"] = ((hidden, q_width), "[hidden, heads × head size]")
        shapes["attn_k.weight"] = ((hidden, kv_width), "[hidden, kv heads × head size]")
        shapes["attn_v.weight"] = ((hidden, kv_width), "[hidden, kv heads × head size]")
    shapes["attn_output.weight"] = ((q_width, hidden), "[heads × head size, hidden]")
    if fam.packed:
        shapes["ffn_up.weight"] = ((hidden, 2 * ffn), "[hidden, 2 × ffn] (gate | up)")
    else:
        shapes["ffn_gate.weight"] = ((hidden, ffn), "[hidden, ffn]")
        shapes["ffn_up.weight"] = ((hidden, ffn), "[hidden, ffn]")
    shapes["ffn_down.weight"] = ((ffn, hidden), "[ffn, hidden]")
    if f.qkv_bias:
        shapes["attn_q.bias"] = ((q_width,), "[heads × head size]")
        shapes["attn_k.bias"] = ((kv_width,), "[kv heads × head size]")
        shapes["attn_v.bias"] = ((kv_width,), "[kv heads × head size]")
    if f.qk_norm:
        shapes["attn_q_norm.weight"] = ((head_dim,), "[head size]")
        shapes["attn_k_norm.weight"] = ((head_dim,), "[head size]")
    if f.post_norms:
        shapes["post_attention_norm.weight"] = ((hidden,), "[hidden]")
        shapes["post_ffw_norm.weight"] = ((hidden,), "[hidden]")
    return shapes


def packed_sources(name: str, q_width: int, kv_width: int, ffn: int) -> tuple[str, int, int] | None:
    """For a packed (phi3) file: graph param ``name`` as (file tensor, first row, rows), or None when
    the param is not cut out of a packed tensor."""
    block, _, part = name.rpartition(".attn_")
    if block and part in ("q.weight", "k.weight", "v.weight"):
        first = {"q": 0, "k": q_width, "v": q_width + kv_width}[part[0]]
        return f"{block}.attn_qkv.weight", first, q_width if part[0] == "q" else kv_width
    block, _, part = name.rpartition(".ffn_")
    if block and part in ("gate.weight", "up.weight"):
        return f"{block}.ffn_up.weight", 0 if part.startswith("gate") else ffn, ffn
    return None

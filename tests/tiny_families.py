"""Tiny random GGUFs of the families beyond llama (gemma2, gemma3, qwen2, qwen3, phi3, and a
llama-architecture Mistral with a sliding window), written with gguf-py's GGUFWriter in llama.cpp's
tensor layout, for checks against transformers loading the same file.

Matrices are Q8_0 (transformers dequantizes them with gguf-py; rlxpy runs them as GGUF GEMVs),
norms and biases F32. Sizes keep what transformers assumes for a GGUF of the family: head size 256
for gemma3 (its config's default query_pre_attn_scalar is 256, and llama.cpp scales by the head
size; gemma2 likewise, with its default softcaps 50 and 30), 128 for qwen3 (Qwen3Config's default
head_dim: its GGUF mapping reads no key length).
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import gguf
import numpy as np

Q8 = gguf.GGMLQuantizationType.Q8_0


@dataclass(frozen=True)
class Tiny:
    arch: str
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 96
    vocab: int = 96
    tied: bool = False
    sliding_window: int = 0
    context: int = 128

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim


FAMILIES = {
    # 6 layers: gemma3's pattern makes layer 5 global, the others slide (window 5 < the prompts)
    "gemma3": Tiny("gemma3", layers=6, heads=2, kv_heads=1, head_dim=256, tied=True, sliding_window=5),
    # 2 layers: layer 0 slides, layer 1 is global; transformers' default softcaps (50, 30) are in the file too
    "gemma2": Tiny("gemma2", heads=2, kv_heads=1, head_dim=256, tied=True, sliding_window=5),
    # a llama-architecture file named mistral, with a sliding window over every layer
    "mistral": Tiny("llama", sliding_window=5),
    "qwen2": Tiny("qwen2"),
    "qwen3": Tiny("qwen3", heads=2, kv_heads=1, head_dim=128),
    "phi3": Tiny("phi3", kv_heads=4),
}


def _layer_matrices(t: Tiny) -> dict[str, tuple[int, int]]:
    """Part -> (rows, cols) in numpy order ([n, k]: GGML's [k, n])."""
    shapes = {"attn_output": (t.hidden, t.q_width), "ffn_down": (t.hidden, t.ffn)}
    if t.arch == "phi3":  # q|k|v in one tensor, gate|up in ffn_up
        shapes["attn_qkv"] = (t.q_width + 2 * t.kv_width, t.hidden)
        shapes["ffn_up"] = (2 * t.ffn, t.hidden)
    else:
        shapes.update(attn_q=(t.q_width, t.hidden), attn_k=(t.kv_width, t.hidden),
                      attn_v=(t.kv_width, t.hidden), ffn_gate=(t.ffn, t.hidden), ffn_up=(t.ffn, t.hidden))
    return shapes


def _layer_vectors(t: Tiny) -> dict[str, int]:
    sizes = {"attn_norm.weight": t.hidden, "ffn_norm.weight": t.hidden}
    if t.arch == "qwen2":
        sizes.update({"attn_q.bias": t.q_width, "attn_k.bias": t.kv_width, "attn_v.bias": t.kv_width})
    if t.arch in ("qwen3", "gemma3"):
        sizes.update({"attn_q_norm.weight": t.head_dim, "attn_k_norm.weight": t.head_dim})
    if t.arch in ("gemma2", "gemma3"):
        sizes.update({"post_attention_norm.weight": t.hidden, "post_ffw_norm.weight": t.hidden})
    return sizes


def write_tiny(path: pathlib.Path, arch: str, seed: int = 3) -> Tiny:
    """Write the tiny ``arch`` model to ``path``; returns its sizes."""
    t = FAMILIES[arch]
    writer = gguf.GGUFWriter(str(path), t.arch)
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"t{i}" for i in range(t.vocab - 4)]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 4 + [-float(i) for i in range(t.vocab - 4)])
    writer.add_token_types([3, 3, 3, 2] + [1] * (t.vocab - 4))
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_block_count(t.layers)
    writer.add_context_length(t.context)
    writer.add_embedding_length(t.hidden)
    writer.add_feed_forward_length(t.ffn)
    writer.add_head_count(t.heads)
    writer.add_head_count_kv(t.kv_heads)
    writer.add_key_length(t.head_dim)
    writer.add_value_length(t.head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1000.0 if arch == "gemma3" else 10000.0)
    if t.arch == "llama":
        writer.add_rope_dimension_count(t.head_dim)
    if arch == "phi3":
        writer.add_rope_dimension_count(t.head_dim)
    if t.sliding_window:
        writer.add_sliding_window(t.sliding_window)
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(50.0)
        writer.add_final_logit_softcapping(30.0)
    rng = np.random.default_rng(seed)

    def matrix(name: str, rows: int, cols: int, scale: float = 0.25) -> None:
        values = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        writer.add_tensor(name, gguf.quants.quantize(values, Q8), raw_dtype=Q8)

    def vector(name: str, size: int) -> None:
        if name.endswith(".bias"):
            values = rng.normal(0.0, 0.5, size)
        else:  # norm weights: the factor itself (gemma's 1 + w as its GGUFs store it)
            values = rng.uniform(0.5, 1.5, size)
        writer.add_tensor(name, values.astype(np.float32))

    matrix("token_embd.weight", t.vocab, t.hidden, 1.0)
    vector("output_norm.weight", t.hidden)
    if not t.tied:
        matrix("output.weight", t.vocab, t.hidden)
    for layer in range(t.layers):
        for part, size in _layer_vectors(t).items():
            vector(f"blk.{layer}.{part}", size)
        for part, (rows, cols) in _layer_matrices(t).items():
            matrix(f"blk.{layer}.{part}.weight", rows, cols)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return t

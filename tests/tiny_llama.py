"""A tiny llama-family GGUF written with gguf-py's GGUFWriter: a SentencePiece vocabulary of byte
tokens plus a few pieces, two Q8_0 layers. Fast enough on lavapipe for end-to-end CLI tests."""

from __future__ import annotations

import pathlib

import gguf
import numpy as np

SPACE = "\u2581"
PIECES = [f"{SPACE}t", "he", f"{SPACE}the", f"{SPACE}c", "at", f"{SPACE}cat", "on", f"{SPACE}on"]
CHARS = sorted(set("thecasonmlHi!,.?-' 0123456789"))
HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, CONTEXT = 64, 4, 2, 96, 2, 64
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def _shape(part: str) -> tuple[int, int]:
    dim = HIDDEN // HEADS
    return {"attn_q": (HIDDEN, HIDDEN), "attn_k": (KV_HEADS * dim, HIDDEN),
            "attn_v": (KV_HEADS * dim, HIDDEN), "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (FFN, HIDDEN),
            "ffn_up": (FFN, HIDDEN), "ffn_down": (HIDDEN, FFN)}[part]


def write_tiny_llama(path: pathlib.Path, poison: str | None = None) -> pathlib.Path:
    """Write the model to ``path``; ``poison`` names an F32 tensor (a norm weight) whose first
    element becomes NaN."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{byte:02X}>" for byte in range(256)] + [SPACE]
    tokens += PIECES + CHARS
    types = [2, 3, 3] + [6] * 256 + [1] * (1 + len(PIECES) + len(CHARS))
    scores = [0.0] * 259 + [-1.0] + [-2.0 - i for i in range(len(PIECES))]
    scores += [-100.0 - i for i in range(len(CHARS))]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(True)
    writer.add_block_count(LAYERS)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    rng = np.random.default_rng(7)

    def matrix(name: str, rows: int, cols: int) -> None:
        values = (rng.standard_normal((rows, cols)) * 0.3).astype(np.float32)
        writer.add_tensor(name, gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0),
                          raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def vector(name: str, size: int) -> None:
        values = rng.uniform(0.5, 1.5, size).astype(np.float32)
        if name == poison:
            values[0] = np.nan
        writer.add_tensor(name, values)

    matrix("token_embd.weight", len(tokens), HIDDEN)
    vector("output_norm.weight", HIDDEN)
    for layer in range(LAYERS):
        vector(f"blk.{layer}.attn_norm.weight", HIDDEN)
        vector(f"blk.{layer}.ffn_norm.weight", HIDDEN)
        for part in MATRICES:
            matrix(f"blk.{layer}.{part}.weight", *_shape(part))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

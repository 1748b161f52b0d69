"""Llama-family decoder graphs: RMSNorm, GQA attention with RoPE, SwiGLU MLP, tied or untied head.

One Graph holds two branches that share every weight and the KV cache: ``prefill`` runs a chunk
of ``chunk`` tokens at a run-time position, ``decode`` runs one token. Each branch writes its K/V
rows into the cache in place (CacheWrite), attends over ``pos + S`` keys (bottom-right causal),
and picks the next token on the GPU (argmax, or sampling), so a decode step reads back 4 bytes.
Run a branch with ``exe.run(inputs, outputs=[...])``: only the steps it needs are encoded.

Weights are GGML tensors of any type DequantMatMulGguf supports (F32 for float checkpoints);
a ``[n, k]`` weight multiplies as ``x @ W^T`` (GGML/ggml_mul_mat layout).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlxpy.errors import GraphError
from rlxpy.ir import DType, Graph, Node
from rlxpy.ir.ops.base import MaskKind
from rlxpy.ir.ops.quant import gguf_row_bytes


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    head_dim: int = 0  # 0 = hidden // heads
    eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_interleaved: bool = False  # True for GGUF llama weights (llama.cpp's permuted Q/K)
    context: int = 2048  # KV-cache capacity
    tied_embeddings: bool = False
    #: One GEMV for Q, K and V (their rows concatenated) when the three share a type: on the
    #: decode path the three outputs are then contiguous views, saving two dispatches a layer.
    fuse_qkv: bool = True
    #: GGML type of each weight by GGUF tensor name ("F32" when absent).
    weight_types: dict[str, str] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def check(self) -> None:
        if self.heads % self.kv_heads:
            raise GraphError(
                f"llama config: {self.heads} heads is not a multiple of {self.kv_heads} kv heads"
            )
        if self.dim % 2:
            raise GraphError(f"llama config: head_dim {self.dim} must be even for RoPE")


def param_sources(name: str) -> list[str]:
    """The checkpoint tensors whose rows, concatenated, make graph param ``name``."""
    if name.endswith(".attn_qkv.weight"):
        block = name[: -len(".attn_qkv.weight")]
        return [f"{block}.attn_q.weight", f"{block}.attn_k.weight", f"{block}.attn_v.weight"]
    return [name]


def _qkv_fusable(cfg: LlamaConfig, layer: int) -> bool:
    types = {cfg.weight_types.get(n, "F32") for n in param_sources(f"blk.{layer}.attn_qkv.weight")}
    return cfg.fuse_qkv and len(types) == 1


def rope_tables(cfg: LlamaConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [context, head_dim/2] with theta_i = base^(-2i/d), as transformers' default rope."""
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, cfg.dim, 2, dtype=np.float64) / cfg.dim))
    angles = np.arange(cfg.context, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class _Weights:
    """Creates each Param once, typed by its GGML type, shared by both branches."""

    def __init__(self, g: Graph, cfg: LlamaConfig) -> None:
        self.g, self.cfg, self.cache = g, cfg, {}

    def matrix(self, name: str, n: int, k: int) -> tuple[Node, str]:
        qtype = self.cfg.weight_types.get(param_sources(name)[0], "F32")
        if name not in self.cache:
            self.cache[name] = self.g.param(name, [n, gguf_row_bytes(qtype, k)], DType.U8)
        return self.cache[name], qtype

    def vector(self, name: str, size: int) -> Node:
        if name not in self.cache:
            self.cache[name] = self.g.param(name, [size], DType.F32)
        return self.cache[name]

    def kv_cache(self, name: str) -> Node:
        if name not in self.cache:
            self.cache[name] = self.g.param(
                name, [self.cfg.context, self.cfg.kv_heads * self.cfg.dim], DType.F32
            )
        return self.cache[name]


def _linear(g: Graph, w: _Weights, x: Node, name: str, n: int, k: int, out: str) -> Node:
    weight, qtype = w.matrix(name, n, k)
    return g.dequant_matmul_gguf(x, weight, qtype, n, k, name=out)


def _branch(
    g: Graph, w: _Weights, cfg: LlamaConfig, prefix: str, seq: int, cos: Node, sin: Node, sampler: dict | None
) -> None:
    tokens = g.input(f"{prefix}_tokens", [seq], DType.I32)
    pos = g.input(f"{prefix}_pos", [1], DType.I32)
    embd_type = cfg.weight_types.get("token_embd.weight", "F32")
    table = w.matrix("token_embd.weight", cfg.vocab_size, cfg.hidden)[0]
    x = g.gather_gguf(table, tokens, embd_type, cfg.hidden, name=f"{prefix}.embd")
    q_width, kv_width = cfg.heads * cfg.dim, cfg.kv_heads * cfg.dim
    for layer in range(cfg.layers):
        blk, at = f"blk.{layer}", f"{prefix}.{layer}"
        h = g.rms_norm(
            x, w.vector(f"{blk}.attn_norm.weight", cfg.hidden), eps=cfg.eps, name=f"{at}.attn_norm"
        )
        k_cache, v_cache = w.kv_cache(f"{blk}.k_cache"), w.kv_cache(f"{blk}.v_cache")
        if _qkv_fusable(cfg, layer):
            # one GEMV for q|k|v, then one kernel rotates q, k and appends k, v to the caches
            qkv = _linear(g, w, h, f"{blk}.attn_qkv.weight", q_width + 2 * kv_width, cfg.hidden, f"{at}.qkv")
            q = g.rope_kv_append(
                qkv,
                k_cache,
                v_cache,
                cos,
                sin,
                pos,
                cfg.dim,
                q_width,
                kv_width,
                interleaved=cfg.rope_interleaved,
                name=f"{at}.q_rope",
            )
            k_all, v_all = k_cache, v_cache  # read after the append: attention depends on q
        else:
            q = _linear(g, w, h, f"{blk}.attn_q.weight", q_width, cfg.hidden, f"{at}.q")
            k = _linear(g, w, h, f"{blk}.attn_k.weight", kv_width, cfg.hidden, f"{at}.k")
            v = _linear(g, w, h, f"{blk}.attn_v.weight", kv_width, cfg.hidden, f"{at}.v")
            q = g.rope(
                q, cos, sin, cfg.dim, interleaved=cfg.rope_interleaved, position=pos, name=f"{at}.q_rope"
            )
            k = g.rope(
                k, cos, sin, cfg.dim, interleaved=cfg.rope_interleaved, position=pos, name=f"{at}.k_rope"
            )
            k_all = g.cache_write(k_cache, k, pos, name=f"{at}.k_cache")
            v_all = g.cache_write(v_cache, v, pos, name=f"{at}.v_cache")
        attn = g.attention(
            g.reshape(q, [1, seq, q_width], name=f"{at}.q3"),
            g.reshape(k_all, [1, cfg.context, kv_width], name=f"{at}.k3"),
            g.reshape(v_all, [1, cfg.context, kv_width], name=f"{at}.v3"),
            cfg.heads,
            cfg.dim,
            num_kv_heads=cfg.kv_heads,
            mask_kind=MaskKind.CAUSAL,
            kv_len=pos,
            name=f"{at}.attn",
        )
        attn = g.reshape(attn, [seq, q_width], name=f"{at}.attn2")
        x = g.add(
            x,
            _linear(g, w, attn, f"{blk}.attn_output.weight", cfg.hidden, q_width, f"{at}.o"),
            name=f"{at}.resid1",
        )
        h = g.rms_norm(x, w.vector(f"{blk}.ffn_norm.weight", cfg.hidden), eps=cfg.eps, name=f"{at}.ffn_norm")
        gate = _linear(g, w, h, f"{blk}.ffn_gate.weight", cfg.ffn, cfg.hidden, f"{at}.gate")
        up = _linear(g, w, h, f"{blk}.ffn_up.weight", cfg.ffn, cfg.hidden, f"{at}.up")
        act = g.mul(g.silu(gate, name=f"{at}.silu"), up, name=f"{at}.swiglu")
        x = g.add(
            x,
            _linear(g, w, act, f"{blk}.ffn_down.weight", cfg.hidden, cfg.ffn, f"{at}.down"),
            name=f"{at}.resid2",
        )
    if seq > 1:  # only the last real token's logits are needed
        last = g.input(f"{prefix}_last", [1], DType.I32)
        x = g.gather(x, last, axis=0, name=f"{prefix}.last_row")
    x = g.rms_norm(x, w.vector("output_norm.weight", cfg.hidden), eps=cfg.eps, name=f"{prefix}.out_norm")
    head = "token_embd.weight" if cfg.tied_embeddings else "output.weight"
    logits = _linear(g, w, x, head, cfg.vocab_size, cfg.hidden, f"{prefix}_logits")
    g.output(logits)
    if sampler and sampler.get("temperature", 0) > 0:
        seed = g.input(f"{prefix}_seed", [2], DType.U32)
        nxt = g.sample(
            logits,
            sampler["temperature"],
            sampler.get("top_k", 0),
            sampler.get("top_p", 1.0),
            seed_input=seed,
            name=f"{prefix}_next",
        )
    else:
        nxt = g.argmax(logits, name=f"{prefix}_next")
    g.output(nxt)


def build_llama(cfg: LlamaConfig, chunk: int = 32, sampler: dict | None = None) -> Graph:
    """The prefill (``chunk`` tokens) + decode (1 token) graph; see the module docstring."""
    cfg.check()
    g = Graph("llama")
    cos_table, sin_table = rope_tables(cfg)
    cos = g.constant(cos_table, name="rope_cos")
    sin = g.constant(sin_table, name="rope_sin")
    weights = _Weights(g, cfg)
    _branch(g, weights, cfg, "prefill", chunk, cos, sin, sampler)
    _branch(g, weights, cfg, "decode", 1, cos, sin, sampler)
    return g

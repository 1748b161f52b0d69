"""A GPT-2 style decoder for training: byte-level tokens, learned positions, pre-norm blocks (LayerNorm,
causal multi-head attention on a fused QKV projection, a tanh-GELU MLP), a final LayerNorm and an
output head tied to the token embedding; the graph ends in the mean cross-entropy of next-token targets.

Inputs ``tokens`` and ``targets`` (i32 [batch, seq]); params named as ``param_shapes`` lists them.
``init_params`` draws GPT-2's initialisation (normal 0.02, the residual projections scaled by
1/sqrt(2 layers), zero biases, unit LayerNorm gains) from a seeded numpy generator; ``stdlib_corpus``
and ``sample_batch`` make byte-level batches from the Python standard library's sources.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlxpy.errors import GraphError
from rlxpy.ir import Graph, Node


@dataclass(frozen=True)
class GptConfig:
    vocab: int = 256
    d_model: int = 128
    heads: int = 4
    layers: int = 2
    seq: int = 64
    batch: int = 8
    mlp_ratio: int = 4
    eps: float = 1e-5

    def check(self) -> None:
        if self.d_model % self.heads:
            raise GraphError(f"gpt config: d_model {self.d_model} is not a multiple of {self.heads} heads")


def param_shapes(cfg: GptConfig) -> dict[str, tuple[int, ...]]:
    """Every param's shape, in graph order."""
    d, inner = cfg.d_model, cfg.mlp_ratio * cfg.d_model
    shapes: dict[str, tuple[int, ...]] = {"wte": (cfg.vocab, d), "wpe": (cfg.seq, d)}
    for i in range(cfg.layers):
        shapes |= {f"h{i}.ln1.g": (d,), f"h{i}.ln1.b": (d,), f"h{i}.attn.qkv.w": (d, 3 * d),
                   f"h{i}.attn.qkv.b": (3 * d,), f"h{i}.attn.proj.w": (d, d), f"h{i}.attn.proj.b": (d,),
                   f"h{i}.ln2.g": (d,), f"h{i}.ln2.b": (d,), f"h{i}.mlp.fc.w": (d, inner),
                   f"h{i}.mlp.fc.b": (inner,), f"h{i}.mlp.proj.w": (inner, d), f"h{i}.mlp.proj.b": (d,)}
    return shapes | {"ln_f.g": (d,), "ln_f.b": (d,)}


def init_params(cfg: GptConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """GPT-2's initialisation, f32."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith(".g"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith(".b"):
            out[name] = np.zeros(shape, np.float32)
        else:
            std = 0.02 / math.sqrt(2 * cfg.layers) if name.endswith("proj.w") else 0.02
            out[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return out


def build_gpt(cfg: GptConfig, name: str = "gpt") -> Graph:
    """The training graph: outputs ``loss`` (mean next-token cross-entropy over every position)."""
    cfg.check()
    g = Graph(name)
    tokens = g.input("tokens", (cfg.batch, cfg.seq), "i32")
    targets = g.input("targets", (cfg.batch, cfg.seq), "i32")
    w = {n: g.param(n, shape) for n, shape in param_shapes(cfg).items()}
    x = g.add(g.gather(w["wte"], tokens, name="embed"), w["wpe"], name="h_in")
    for i in range(cfg.layers):
        x = _block(g, cfg, w, f"h{i}", x)
    x = g.layer_norm(x, w["ln_f.g"], w["ln_f.b"], cfg.eps, name="ln_f")
    logits = g.matmul(x, g.transpose(w["wte"], (1, 0), name="head_t"), name="logits")
    g.output(g.cross_entropy(logits, targets, "mean", name="loss"))
    return g


def _block(g: Graph, cfg: GptConfig, w: dict[str, Node], p: str, x: Node) -> Node:
    d = cfg.d_model
    h = g.layer_norm(x, w[f"{p}.ln1.g"], w[f"{p}.ln1.b"], cfg.eps, name=f"{p}.ln1")
    qkv = g.linear(h, w[f"{p}.attn.qkv.w"], w[f"{p}.attn.qkv.b"], name=f"{p}.qkv")
    q, k, v = (g.narrow(qkv, 2, j * d, d, name=f"{p}.{part}") for j, part in enumerate("qkv"))
    a = g.attention(q, k, v, cfg.heads, d // cfg.heads, mask_kind="causal", name=f"{p}.attn")
    x = g.add(x, g.linear(a, w[f"{p}.attn.proj.w"], w[f"{p}.attn.proj.b"], name=f"{p}.attn_out"),
              name=f"{p}.res1")
    h = g.layer_norm(x, w[f"{p}.ln2.g"], w[f"{p}.ln2.b"], cfg.eps, name=f"{p}.ln2")
    h = g.linear(h, w[f"{p}.mlp.fc.w"], w[f"{p}.mlp.fc.b"], activation="gelu_approx", name=f"{p}.fc")
    return g.add(x, g.linear(h, w[f"{p}.mlp.proj.w"], w[f"{p}.mlp.proj.b"], name=f"{p}.mlp_out"),
                 name=f"{p}.res2")


def stdlib_corpus(max_bytes: int = 1 << 22) -> np.ndarray:
    """Bytes (u8) of the Python standard library's .py sources, in sorted path order, up to ``max_bytes``."""
    root = Path(os.__file__).parent
    chunks, total = [], 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    return np.frombuffer(b"".join(chunks)[:max_bytes], dtype=np.uint8).copy()


def sample_batch(corpus: np.ndarray, cfg: GptConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``batch`` random windows of the corpus: tokens = seq bytes, targets = the next byte of each."""
    starts = rng.integers(0, len(corpus) - cfg.seq - 1, cfg.batch)
    windows = np.stack([corpus[s:s + cfg.seq + 1] for s in starts]).astype(np.int32)
    return {"tokens": windows[:, :-1].copy(), "targets": windows[:, 1:].copy()}

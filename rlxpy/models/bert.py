"""BERT encoders (all-MiniLM-L6-v2 and other ``BertModel`` checkpoints) built with the builder.

``build_bert`` makes one graph with symbolic batch ``B`` and sequence ``S`` dims, so a single
graph serves every batch; ``rlxpy.compile`` compiles it per (B, S) binding at the first run.

    x   = LayerNorm(word[ids] + position[0..S-1] + token_type[types])
    per layer: a = Attention(x Wq + bq, x Wk + bk, x Wv + bv; keep-mask = attention_mask)
               x = LayerNorm(x + a Wo + bo);  x = LayerNorm(x + GELU(x Wi + bi) Wo2 + bo2)
    pooled = sum_s(x * mask) / max(sum_s(mask), 1e-9);  embedding = pooled / max(|pooled|, 1e-12)

This is transformers' ``BertModel`` (exact erf GELU, post-norm) followed by sentence-transformers'
``Pooling(mean)`` and ``Normalize`` modules. Padding rows take part in nothing: the attention
keep-mask hides padded keys and the pooling ignores padded rows, so a padded batch gives each
sentence the embedding it has alone. Weights are read with numpy (no torch): ``Linear`` weights
``[out, in]`` are stored transposed, ``[in, out]``, for ``x @ W``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import rlxpy
from rlxpy.errors import InputError, ModelError
from rlxpy.ir import DType, Graph, Node, Sym
from rlxpy.ir.ops.base import MaskKind

MEAN_POOL_EPS = 1e-9  # sentence-transformers: torch.clamp(sum_mask, min=1e-9)
NORMALIZE_EPS = 1e-12  # torch.nn.functional.normalize's default eps


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden: int = 384
    layers: int = 6
    heads: int = 12
    intermediate: int = 1536
    max_positions: int = 512
    type_vocab_size: int = 2
    eps: float = 1e-12
    hidden_act: str = "gelu"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @staticmethod
    def from_dict(config: Mapping[str, Any]) -> BertConfig:
        """From a transformers ``config.json`` dict (model_type "bert")."""
        act = config.get("hidden_act", "gelu")
        if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu"):
            raise ModelError(f"bert config: hidden_act {act!r} is not supported (gelu, gelu_new, relu)")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ModelError("bert config: only absolute position embeddings are supported")
        cfg = BertConfig(config["vocab_size"], config["hidden_size"], config["num_hidden_layers"],
                         config["num_attention_heads"], config["intermediate_size"],
                         config.get("max_position_embeddings", 512), config.get("type_vocab_size", 2),
                         config.get("layer_norm_eps", 1e-12), act)
        if cfg.hidden % cfg.heads:
            raise ModelError(f"bert config: hidden {cfg.hidden} is not a multiple of {cfg.heads} heads")
        return cfg


def _activation(cfg: BertConfig) -> str:
    # transformers: "gelu" is the exact erf form, "gelu_new"/"gelu_pytorch_tanh" the tanh one
    return {"gelu": "gelu", "relu": "relu"}.get(cfg.hidden_act, "gelu_approx")


BATCH, SEQ = Sym("B"), Sym("S")


def build_bert(cfg: BertConfig, pooling: bool = True, token_types: bool = False,
               batch: int | Sym = BATCH, seq: int | Sym = SEQ, fuse_qkv: bool = False) -> Graph:
    """The encoder graph. Inputs: ``input_ids`` i32 [B, S], ``attention_mask`` f32 [B, S] (1 keeps a
    token, 0 is padding), and ``token_type_ids`` i32 [B, S] when ``token_types`` (else type 0).
    Outputs: ``last_hidden_state`` [B, S, H] and, with ``pooling``, ``embeddings`` [B, H].
    ``fuse_qkv``: one [H, 3H] projection (params ``...attention.self.qkv.weight/bias``, made by
    ``fuse_qkv_params``) sliced into q, k, v, which the packed-attention pattern reads in place."""
    g = Graph("bert")
    hidden = cfg.hidden
    ids = g.input("input_ids", [batch, seq], DType.I32)
    mask = g.input("attention_mask", [batch, seq], DType.F32)

    def vector(name: str, size: int) -> Node:
        return g.param(name, [size])

    def linear(x: Node, prefix: str, n_in: int, n_out: int, out: str, act: str | None = None) -> Node:
        w = g.param(f"{prefix}.weight", [n_in, n_out])
        return g.linear(x, w, vector(f"{prefix}.bias", n_out), activation=act, name=out)

    words = g.gather(g.param("embeddings.word_embeddings.weight", [cfg.vocab_size, hidden]), ids,
                     name="emb.words")
    # positions 0..S-1 as a gather index: an exclusive prefix sum of ones works for a symbolic S
    ones = g.expand(g.constant(np.ones([1], np.float32), name="emb.one"), [seq], name="emb.ones")
    positions = g.cast(g.cumsum(ones, exclusive=True, name="emb.iota"), DType.I32, name="emb.positions")
    pos = g.gather(g.param("embeddings.position_embeddings.weight", [cfg.max_positions, hidden]), positions,
                   name="emb.pos")
    type_table = g.param("embeddings.token_type_embeddings.weight", [cfg.type_vocab_size, hidden])
    if token_types:
        types = g.gather(type_table, g.input("token_type_ids", [batch, seq], DType.I32), name="emb.types")
    else:
        types = g.narrow(type_table, 0, 0, 1, name="emb.types")
    x = g.add(g.add(words, pos, name="emb.words_pos"), types, name="emb.sum")
    x = g.layer_norm(x, vector("embeddings.LayerNorm.weight", hidden),
                     vector("embeddings.LayerNorm.bias", hidden), eps=cfg.eps, name="emb.norm")
    for layer in range(cfg.layers):
        p, at = f"encoder.layer.{layer}", f"l{layer}"
        if fuse_qkv:
            qkv = linear(x, f"{p}.attention.self.qkv", hidden, 3 * hidden, f"{at}.qkv")
            q, k, v = (g.narrow(qkv, 2, i * hidden, hidden, name=f"{at}.{part}")
                       for i, part in enumerate("qkv"))
        else:
            q = linear(x, f"{p}.attention.self.query", hidden, hidden, f"{at}.q")
            k = linear(x, f"{p}.attention.self.key", hidden, hidden, f"{at}.k")
            v = linear(x, f"{p}.attention.self.value", hidden, hidden, f"{at}.v")
        attn = g.attention(q, k, v, cfg.heads, cfg.head_dim, mask_kind=MaskKind.CUSTOM, mask=mask,
                           name=f"{at}.attn")
        o = linear(attn, f"{p}.attention.output.dense", hidden, hidden, f"{at}.o")
        x = g.residual_layer_norm(o, x, vector(f"{p}.attention.output.LayerNorm.weight", hidden),
                                  vector(f"{p}.attention.output.LayerNorm.bias", hidden), eps=cfg.eps,
                                  name=f"{at}.attn_norm")
        h = linear(x, f"{p}.intermediate.dense", hidden, cfg.intermediate, f"{at}.ffn_in", _activation(cfg))
        o = linear(h, f"{p}.output.dense", cfg.intermediate, hidden, f"{at}.ffn_out")
        x = g.residual_layer_norm(o, x, vector(f"{p}.output.LayerNorm.weight", hidden),
                                  vector(f"{p}.output.LayerNorm.bias", hidden), eps=cfg.eps,
                                  name=f"{at}.ffn_norm" if layer < cfg.layers - 1 else "last_hidden_state")
    g.output(x)
    if pooling:
        g.output(mean_pool_normalize(g, x, mask, batch, seq, hidden))
    return g


def mean_pool_normalize(g: Graph, x: Node, mask: Node, batch: int | Sym, seq: int | Sym, hidden: int) -> Node:
    """sentence-transformers' mean pooling over kept tokens, then L2 normalisation (F.normalize)."""
    mask3 = g.reshape(mask, [batch, seq, 1], name="pool.mask3")
    summed = g.sum(g.mul(x, mask3, name="pool.masked"), 1, name="pool.sum")  # [B, H]
    count = g.maximum(g.sum(mask, 1, keep_dim=True, name="pool.count"), MEAN_POOL_EPS, name="pool.count_min")
    pooled = g.div(summed, count, name="pool.mean")
    norm = g.activation(g.sum(g.mul(pooled, pooled, name="pool.sq"), 1, keep_dim=True, name="pool.sq_sum"),
                        "sqrt", name="pool.norm")
    return g.div(pooled, g.maximum(norm, NORMALIZE_EPS, name="pool.norm_min"), name="embeddings")


# -- weights --------------------------------------------------------------------------------------

def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as a numpy array (``safetensors.numpy`` when installed,
    else the format read directly: u64 header size, JSON header, little-endian raw data)."""
    try:
        from safetensors.numpy import load_file  # optional: the format is read directly without it
    except ImportError:
        load_file = None
    if load_file is not None:
        return load_file(str(path))
    kinds = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
             "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
    raw = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in kinds:
            raise ModelError(f"{path}: tensor {name!r} has dtype {info['dtype']}, which numpy cannot read")
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(raw, kinds[info["dtype"]], offset=8 + size + start,
                                  count=(end - start) // np.dtype(kinds[info["dtype"]]).itemsize
                                  ).reshape(info["shape"])
    return out


def bert_params(cfg: BertConfig, state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's params from a BertModel state dict (keys with or without a ``bert.`` prefix)."""
    state = {k.removeprefix("bert."): v for k, v in state.items()}
    g = build_bert(cfg, pooling=False, token_types=True)
    params = {}
    for node in g.params():
        name = node.op.name
        if name not in state:
            raise ModelError(f"bert weights: {name!r} is missing (have {len(state)} tensors)")
        value = np.asarray(state[name], dtype=np.float32)
        if name.endswith(".weight") and value.ndim == 2 and "embeddings" not in name:
            value = value.T  # torch Linear [out, in] -> [in, out] for x @ W
        if tuple(value.shape) != tuple(node.shape):
            raise ModelError(f"bert weights: {name!r} has shape {list(value.shape)}, config needs "
                             f"{list(node.shape)}")
        params[name] = np.ascontiguousarray(value)
    return params


def fuse_qkv_params(cfg: BertConfig, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``bert_params`` for a ``fuse_qkv`` graph: each layer's query/key/value weights [H, H] and
    biases side by side as one qkv weight [H, 3H] and bias [3H]."""
    fused = dict(params)
    for layer in range(cfg.layers):
        p = f"encoder.layer.{layer}.attention.self"
        for kind, axis in (("weight", 1), ("bias", 0)):
            parts = [fused.pop(f"{p}.{role}.{kind}") for role in ("query", "key", "value")]
            fused[f"{p}.qkv.{kind}"] = np.ascontiguousarray(np.concatenate(parts, axis=axis))
    return fused


def load_bert_dir(model_dir: str | Path) -> tuple[BertConfig, dict[str, np.ndarray]]:
    """Config and graph params from a transformers model directory (config.json + model.safetensors)."""
    root = Path(model_dir)
    if not (root / "config.json").is_file() or not (root / "model.safetensors").is_file():
        raise ModelError(f"{root}: expected config.json and model.safetensors")
    cfg = BertConfig.from_dict(json.loads((root / "config.json").read_text()))
    return cfg, bert_params(cfg, read_safetensors(root / "model.safetensors"))


class BertEncoder:
    """A compiled encoder: ``encode(ids, mask)`` returns (last hidden state, normalised embeddings).

    Compiles lazily per (batch, sequence) shape; callers that pad to a few bucket lengths
    (see ``embed.py``) reuse the compiled graph. ``params`` are ``bert_params`` names; with
    ``fuse_qkv`` (default) each layer runs one QKV projection that attention reads in place."""

    def __init__(self, cfg: BertConfig, params: Mapping[str, np.ndarray], fuse_qkv: bool = True,
                 **options: Any) -> None:
        self.cfg = cfg
        self.graph = build_bert(cfg, fuse_qkv=fuse_qkv)
        self.exe = rlxpy.compile(self.graph, **options)
        for name, value in (fuse_qkv_params(cfg, params) if fuse_qkv else params).items():
            self.exe.set_param(name, value)

    @staticmethod
    def from_dir(model_dir: str | Path, **options: Any) -> BertEncoder:
        cfg, params = load_bert_dir(model_dir)
        return BertEncoder(cfg, params, **options)

    def encode(self, ids: Sequence[Sequence[int]] | np.ndarray, mask: Sequence[Sequence[int]] | np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ids)
        mask = np.asarray(mask)
        if ids.dtype.kind not in "iu" or mask.dtype.kind not in "iufb":
            raise InputError(f"bert: token ids must be integers and the mask numeric, got {ids.dtype} and "
                             f"{mask.dtype}")
        if ids.ndim != 2 or mask.shape != ids.shape:
            raise InputError(f"bert: ids {list(ids.shape)} and mask {list(mask.shape)} must both be [B, S]")
        if ids.size and (ids.min() < 0 or ids.max() >= self.cfg.vocab_size):
            raise InputError(f"bert: token ids must lie in [0, {self.cfg.vocab_size}), got "
                             f"[{ids.min()}, {ids.max()}]")
        if ids.shape[1] > self.cfg.max_positions:
            raise InputError(f"bert: {ids.shape[1]} tokens exceed the {self.cfg.max_positions} positions")
        out = self.exe.run({"input_ids": ids.astype(np.int32), "attention_mask": mask.astype(np.float32)})
        return out["last_hidden_state"], out["embeddings"]

"""Decoder-only transformer graphs: one builder for every GGUF family, with family switches.

llama, mistral and granite are the defaults; :class:`Features` switches on what other families
add: q/k/v biases (qwen2), per-head q/k RMSNorm (qwen3, gemma3), norms after the attention and
FFN outputs (gemma3), GeGLU, embedding scaling, an attention scale of its own, sliding-window
layers with their own RoPE base (gemma3), attention and final-logit softcapping (gemma2-style).

One Graph holds two branches that share every weight and the KV cache: ``prefill`` runs a chunk
of ``chunk`` tokens at a run-time position, ``decode`` runs one token. Each branch writes its K/V
rows into the cache in place (CacheWrite), attends over ``pos + S`` keys (bottom-right causal,
or a sliding window), and picks the next token on the GPU (argmax, or sampling), so a decode step
reads back 4 bytes. Run a branch with ``exe.run(inputs, outputs=[...])``: only the steps it needs
are encoded.

Weights are GGML tensors of any type DequantMatMulGguf supports (F32 for float checkpoints);
a ``[n, k]`` weight multiplies as ``x @ W^T`` (GGML/ggml_mul_mat layout). Norm weights are the
factor the normalised x is multiplied by (Gemma's ``1 + w`` is stored that way in its GGUFs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlxpy.errors import GraphError
from rlxpy.ir import DType, Graph, Node
from rlxpy.ir.ops.base import MaskKind
from rlxpy.ir.ops.quant import gguf_row_bytes

#: Gate activations of the gated MLP: SwiGLU (llama) and GeGLU with tanh-approximated GELU (gemma).
GATE_ACTIVATIONS = ("silu", "gelu_tanh")


@dataclass(frozen=True)
class Features:
    """What a family adds to the llama block; every switch off is llama."""

    #: q, k and v add a bias after their projection (``attn_{q,k,v}.bias``: qwen2).
    qkv_bias: bool = False
    #: RMSNorm over each head of q and of k before RoPE (``attn_{q,k}_norm.weight``: qwen3, gemma3).
    qk_norm: bool = False
    #: RMSNorm of the attention and FFN outputs before each residual add
    #: (``post_attention_norm`` / ``post_ffw_norm``: gemma2, gemma3).
    post_norms: bool = False
    #: the gated MLP's activation: "silu" (SwiGLU) or "gelu_tanh" (GeGLU).
    gate_act: str = "silu"
    #: token embeddings are multiplied by this (gemma: sqrt(hidden), rounded to f32).
    embed_scale: float = 1.0
    #: attention score scale; 0 = 1/sqrt(head_dim) (gemma: query_pre_attn_scalar ** -0.5).
    attn_scale: float = 0.0
    #: scores <- c * tanh(scores / c) before the mask (0 = off).
    attn_softcap: float = 0.0
    #: logits <- c * tanh(logits / c) (0 = off).
    final_softcap: float = 0.0
    #: keys a sliding-window layer attends, its own included (transformers' ``sliding_window``); 0 = none.
    sliding_window: int = 0
    #: per layer, True where it uses the sliding window; empty with a window = every layer slides.
    sliding_layers: tuple[bool, ...] = ()
    #: RoPE base of the sliding-window layers (0 = rope_theta, the same as the global layers).
    rope_theta_local: float = 0.0

    def check(self, layers: int) -> None:
        if self.gate_act not in GATE_ACTIVATIONS:
            raise GraphError(f"transformer features: gate activation {self.gate_act!r} is not one of "
                             f"{', '.join(GATE_ACTIVATIONS)}")
        if self.sliding_layers and len(self.sliding_layers) != layers:
            raise GraphError(f"transformer features: {len(self.sliding_layers)} sliding-layer flags for "
                             f"{layers} layers")
        if any(self.sliding_layers) and self.sliding_window < 1:
            raise GraphError("transformer features: sliding layers without a sliding window")

    def sliding(self, layer: int) -> bool:
        """Whether ``layer`` attends through the sliding window."""
        if self.sliding_window < 1:
            return False
        return self.sliding_layers[layer] if self.sliding_layers else True


@dataclass(frozen=True)
class TransformerConfig:
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
    #: the family's switches (llama when left default).
    features: Features = field(default_factory=Features)
    #: a weight matrix of more bytes is split into row blocks of at most this many (0 = never): one
    #: storage binding must hold a GEMV's weight (Gemma's 262k x 640 embedding is 170 MiB in Q8_0,
    #: lavapipe binds 128 MiB). Block params are named ``{name}@{first row}+{rows}``.
    max_weight_bytes: int = 0

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def check(self) -> None:
        if self.heads % self.kv_heads:
            raise GraphError(
                f"transformer config: {self.heads} heads is not a multiple of {self.kv_heads} kv heads"
            )
        if self.dim % 2:
            raise GraphError(f"transformer config: head_dim {self.dim} must be even for RoPE")
        self.features.check(self.layers)

    def weight_type(self, name: str) -> str:
        """GGML type of graph param ``name`` (that of its first source tensor)."""
        if name in self.weight_types:
            return self.weight_types[name]
        return self.weight_types.get(param_sources(name)[0], "F32")


def row_block(name: str) -> tuple[str, int, int] | None:
    """(matrix name, first row, rows) of a row-block param ``{name}@{first}+{rows}``, else None."""
    base, at, span = name.rpartition("@")
    first, plus, rows = span.partition("+")
    if not (at and plus and first.isdigit() and rows.isdigit()):
        return None
    return base, int(first), int(rows)


def param_sources(name: str) -> list[str]:
    """The checkpoint tensors whose rows, concatenated, make graph param ``name`` (a row-block
    param: its matrix, of which it holds a row range, see :func:`row_block`)."""
    block = row_block(name)
    if block is not None:
        return param_sources(block[0])
    for kind in ("weight", "bias"):
        suffix = f".attn_qkv.{kind}"
        if name.endswith(suffix):
            block = name[: -len(suffix)]
            return [f"{block}.attn_q.{kind}", f"{block}.attn_k.{kind}", f"{block}.attn_v.{kind}"]
    return [name]


def _qkv_fusable(cfg: TransformerConfig, layer: int) -> bool:
    if not cfg.fuse_qkv or cfg.features.qk_norm:
        return False
    name = f"blk.{layer}.attn_qkv.weight"
    if name in cfg.weight_types:  # the file packs q|k|v in one tensor (phi3)
        return True
    return len({cfg.weight_types.get(n, "F32") for n in param_sources(name)}) == 1


def rope_tables(cfg: TransformerConfig, theta: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [context, head_dim/2] with theta_i = base^(-2i/d), as transformers' default rope."""
    base = cfg.rope_theta if theta is None else theta
    inv_freq = 1.0 / (base ** (np.arange(0, cfg.dim, 2, dtype=np.float64) / cfg.dim))
    angles = np.arange(cfg.context, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class _Weights:
    """Creates each Param once, typed by its GGML type, shared by both branches."""

    def __init__(self, g: Graph, cfg: TransformerConfig) -> None:
        self.g, self.cfg, self.cache = g, cfg, {}

    def matrix(self, name: str, n: int, k: int) -> tuple[Node, str]:
        qtype = self.cfg.weight_type(name)
        if name not in self.cache:
            self.cache[name] = self.g.param(name, [n, gguf_row_bytes(qtype, k)], DType.U8)
        return self.cache[name], qtype

    def blocks(self, name: str, n: int, k: int) -> list[tuple[Node, str, int, int]]:
        """The matrix as (param, type, first row, rows) row blocks of at most max_weight_bytes each
        (one block, the plain param, when it fits)."""
        qtype = self.cfg.weight_type(name)
        row = gguf_row_bytes(qtype, k)
        cap = self.cfg.max_weight_bytes
        if not cap or n * row <= cap:
            return [(self.matrix(name, n, k)[0], qtype, 0, n)]
        per = max(1, cap // row)
        out = []
        for first in range(0, n, per):
            rows = min(per, n - first)
            part = f"{name}@{first}+{rows}"
            if part not in self.cache:
                self.cache[part] = self.g.param(part, [rows, row], DType.U8)
            out.append((self.cache[part], qtype, first, rows))
        return out

    def vector(self, name: str, size: int) -> Node:
        if name not in self.cache:
            self.cache[name] = self.g.param(name, [size], DType.F32)
        return self.cache[name]

    def kv_cache(self, name: str, slots: int = 0) -> Node:
        """A layer's K or V cache: [context, kv width], or ``slots`` caches of ``context`` rows each
        stacked (the batched decode's: slot b is rows [b * context, (b + 1) * context))."""
        if slots:  # blk.{i}.slots.k_cache: still a *k_cache / *v_cache name (zeroed, not loaded)
            block, _, kind = name.rpartition(".")
            name = f"{block}.slots.{kind}"
        if name not in self.cache:
            self.cache[name] = self.g.param(
                name, [max(slots, 1) * self.cfg.context, self.cfg.kv_heads * self.cfg.dim], DType.F32
            )
        return self.cache[name]


@dataclass(frozen=True)
class _Rope:
    cos: Node
    sin: Node


@dataclass(frozen=True)
class _Step:
    """One branch's run-time inputs and shape: ``seq`` tokens at position ``pos``; with ``slots``
    (batched decode) ``seq`` = ``slots`` rows, one token of each slot's sequence, ``pos`` i32[slots]
    their positions, and the KV caches one ``context``-row region per slot."""

    g: Graph
    w: _Weights
    cfg: TransformerConfig
    prefix: str
    seq: int
    pos: Node
    slots: int = 0


def _linear(s: _Step, x: Node, name: str, n: int, k: int, out: str) -> Node:
    blocks = s.w.blocks(name, n, k)
    if len(blocks) == 1:
        weight, qtype = s.w.matrix(name, n, k)
        return s.g.dequant_matmul_gguf(x, weight, qtype, n, k, name=out)
    parts = [s.g.dequant_matmul_gguf(x, weight, qtype, rows, k, name=f"{out}@{first}")
             for weight, qtype, first, rows in blocks]
    return s.g.concat(parts, axis=-1, name=out)


def _embed(s: _Step, tokens: Node) -> Node:
    """The token embeddings [seq, hidden]; a table split in row blocks is gathered block by block
    (indices clamped into the block), each token taking the rows of the last block at or below it."""
    g, cfg = s.g, s.cfg
    blocks = s.w.blocks("token_embd.weight", cfg.vocab_size, cfg.hidden)
    x = None
    for table, qtype, first, rows in blocks:
        local = g.sub(tokens, first, name=f"{s.prefix}.embd_idx@{first}") if first else tokens
        inside = g.minimum(g.maximum(local, 0), rows - 1, name=f"{s.prefix}.embd_clamp@{first}") \
            if len(blocks) > 1 else local
        name = f"{s.prefix}.embd" if len(blocks) == 1 else f"{s.prefix}.embd@{first}"
        rows_of = g.gather_gguf(table, inside, qtype, cfg.hidden, name=name)
        if x is None:
            x = rows_of
            continue
        mine = g.reshape(g.compare(local, 0, "ge"), [s.seq, 1], name=f"{s.prefix}.embd_mine@{first}")
        x = g.where(mine, rows_of, x, name=f"{s.prefix}.embd_to@{first}")
    assert x is not None
    return x


def _head_norm(s: _Step, x: Node, weight: str, heads: int, out: str) -> Node:
    """RMSNorm over each head_dim slice of the [seq, heads * head_dim] rows."""
    g, dim = s.g, s.cfg.dim
    rows = g.reshape(x, [s.seq * heads, dim], name=f"{out}_rows")
    normed = g.rms_norm(rows, s.w.vector(weight, dim), eps=s.cfg.eps, name=out)
    return g.reshape(normed, [s.seq, heads * dim], name=f"{out}_flat")


def _rope(s: _Step, x: Node, rope: _Rope, out: str) -> Node:
    """RoPE of [seq, width] rows at the branch's positions (batched: row b at pos[b])."""
    g, cfg = s.g, s.cfg
    if not s.slots:
        return g.rope(x, rope.cos, rope.sin, cfg.dim, interleaved=cfg.rope_interleaved, position=s.pos,
                      name=out)
    width = x.shape[-1]
    rows = g.reshape(x, [s.slots, 1, width], name=f"{out}_in")  # one [1, width] block per slot
    rotated = g.rope(rows, rope.cos, rope.sin, cfg.dim, interleaved=cfg.rope_interleaved, position=s.pos,
                     name=f"{out}_rows")
    return g.reshape(rotated, [s.slots, width], name=out)


def _attention(s: _Step, h: Node, layer: int, rope: _Rope) -> Node:
    """The attention block's output (before the output projection), [seq, heads * head_dim]."""
    g, w, cfg, f = s.g, s.w, s.cfg, s.cfg.features
    blk, at = f"blk.{layer}", f"{s.prefix}.{layer}"
    q_width, kv_width = cfg.heads * cfg.dim, cfg.kv_heads * cfg.dim
    k_cache, v_cache = w.kv_cache(f"{blk}.k_cache", s.slots), w.kv_cache(f"{blk}.v_cache", s.slots)
    if _qkv_fusable(cfg, layer):
        # one GEMV for q|k|v, then one kernel rotates q, k and appends k, v to the caches
        qkv = _linear(s, h, f"{blk}.attn_qkv.weight", q_width + 2 * kv_width, cfg.hidden, f"{at}.qkv")
        if f.qkv_bias:
            qkv = g.add(qkv, w.vector(f"{blk}.attn_qkv.bias", q_width + 2 * kv_width), name=f"{at}.qkv_bias")
        q = g.rope_kv_append(qkv, k_cache, v_cache, rope.cos, rope.sin, s.pos, cfg.dim, q_width, kv_width,
                             interleaved=cfg.rope_interleaved, name=f"{at}.q_rope")
        k_all, v_all = k_cache, v_cache  # read after the append: attention depends on q
    else:
        parts = {}
        for part, width in (("q", q_width), ("k", kv_width), ("v", kv_width)):
            y = _linear(s, h, f"{blk}.attn_{part}.weight", width, cfg.hidden, f"{at}.{part}")
            if f.qkv_bias:
                y = g.add(y, w.vector(f"{blk}.attn_{part}.bias", width), name=f"{at}.{part}_bias")
            parts[part] = y
        q, k, v = parts["q"], parts["k"], parts["v"]
        if f.qk_norm:
            q = _head_norm(s, q, f"{blk}.attn_q_norm.weight", cfg.heads, f"{at}.q_norm")
            k = _head_norm(s, k, f"{blk}.attn_k_norm.weight", cfg.kv_heads, f"{at}.k_norm")
        q, k = _rope(s, q, rope, f"{at}.q_rope"), _rope(s, k, rope, f"{at}.k_rope")
        k_all = g.cache_write(k_cache, k, s.pos, name=f"{at}.k_cache")
        v_all = g.cache_write(v_cache, v, s.pos, name=f"{at}.v_cache")
    sliding = f.sliding(layer)
    # batched decode: batch b is slot b's one query over its own cache region, at its own length
    batch, queries = (s.slots, 1) if s.slots else (1, s.seq)
    attn = g.attention(
        g.reshape(q, [batch, queries, q_width], name=f"{at}.q3"),
        g.reshape(k_all, [batch, cfg.context, kv_width], name=f"{at}.k3"),
        g.reshape(v_all, [batch, cfg.context, kv_width], name=f"{at}.v3"),
        cfg.heads,
        cfg.dim,
        num_kv_heads=cfg.kv_heads,
        mask_kind=MaskKind.SLIDING_WINDOW if sliding else MaskKind.CAUSAL,
        score_scale=f.attn_scale or None,
        softcap=f.attn_softcap or None,
        # Attention's window counts the keys before the query's own; transformers' counts it too
        window=f.sliding_window - 1 if sliding else 0,
        kv_len=s.pos,
        name=f"{at}.attn",
    )
    return g.reshape(attn, [s.seq, q_width], name=f"{at}.attn2")


def _mlp(s: _Step, h: Node, layer: int) -> Node:
    g, cfg = s.g, s.cfg
    blk, at = f"blk.{layer}", f"{s.prefix}.{layer}"
    gate = _linear(s, h, f"{blk}.ffn_gate.weight", cfg.ffn, cfg.hidden, f"{at}.gate")
    up = _linear(s, h, f"{blk}.ffn_up.weight", cfg.ffn, cfg.hidden, f"{at}.up")
    if cfg.features.gate_act == "gelu_tanh":
        act = g.mul(g.gelu(gate, approximate=True, name=f"{at}.gelu"), up, name=f"{at}.geglu")
    else:
        act = g.mul(g.silu(gate, name=f"{at}.silu"), up, name=f"{at}.swiglu")
    return _linear(s, act, f"{blk}.ffn_down.weight", cfg.hidden, cfg.ffn, f"{at}.down")


def _layer(s: _Step, x: Node, layer: int, rope: _Rope) -> Node:
    g, w, cfg = s.g, s.w, s.cfg
    post = cfg.features.post_norms
    blk, at = f"blk.{layer}", f"{s.prefix}.{layer}"
    q_width = cfg.heads * cfg.dim
    h = g.rms_norm(x, w.vector(f"{blk}.attn_norm.weight", cfg.hidden), eps=cfg.eps, name=f"{at}.attn_norm")
    attn = _attention(s, h, layer, rope)
    o = _linear(s, attn, f"{blk}.attn_output.weight", cfg.hidden, q_width, f"{at}.o")
    if post:
        o = g.rms_norm(o, w.vector(f"{blk}.post_attention_norm.weight", cfg.hidden), eps=cfg.eps,
                       name=f"{at}.post_attn_norm")
    x = g.add(x, o, name=f"{at}.resid1")
    h = g.rms_norm(x, w.vector(f"{blk}.ffn_norm.weight", cfg.hidden), eps=cfg.eps, name=f"{at}.ffn_norm")
    down = _mlp(s, h, layer)
    if post:
        down = g.rms_norm(down, w.vector(f"{blk}.post_ffw_norm.weight", cfg.hidden), eps=cfg.eps,
                          name=f"{at}.post_ffw_norm")
    return g.add(x, down, name=f"{at}.resid2")


def _branch(g: Graph, w: _Weights, cfg: TransformerConfig, prefix: str, seq: int, ropes: tuple[_Rope, _Rope],
            sampler: dict | None, slots: int = 0, per_row: bool = False) -> None:
    """A branch: ``seq`` tokens of one sequence, or (``slots``) one token of each of ``slots``
    sequences. ``per_row``: the next token is sampled with run-time settings per row
    (``{prefix}_settings`` f32[rows, 3], ``{prefix}_seeds`` u32[rows, 2]) instead of ``sampler``."""
    f = cfg.features
    tokens = g.input(f"{prefix}_tokens", [seq], DType.I32)
    pos = g.input(f"{prefix}_pos", [slots or 1], DType.I32)
    s = _Step(g, w, cfg, prefix, seq, pos, slots)
    x = _embed(s, tokens)
    if f.embed_scale != 1.0:
        x = g.mul(x, f.embed_scale, name=f"{prefix}.embd_scaled")
    for layer in range(cfg.layers):
        x = _layer(s, x, layer, ropes[1] if f.sliding(layer) else ropes[0])
    if seq > 1 and not slots:  # only the last real token's logits are needed
        last = g.input(f"{prefix}_last", [1], DType.I32)
        x = g.gather(x, last, axis=0, name=f"{prefix}.last_row")
    x = g.rms_norm(x, w.vector("output_norm.weight", cfg.hidden), eps=cfg.eps, name=f"{prefix}.out_norm")
    head = "token_embd.weight" if cfg.tied_embeddings else "output.weight"
    if f.final_softcap:
        logits = _linear(s, x, head, cfg.vocab_size, cfg.hidden, f"{prefix}.raw_logits")
        capped = g.tanh(g.mul(logits, 1.0 / f.final_softcap, name=f"{prefix}.cap_in"), name=f"{prefix}.cap")
        logits = g.mul(capped, f.final_softcap, name=f"{prefix}_logits")
    else:
        logits = _linear(s, x, head, cfg.vocab_size, cfg.hidden, f"{prefix}_logits")
    g.output(logits)
    if per_row:
        rows = slots or 1
        settings = g.input(f"{prefix}_settings", [rows, 3], DType.F32)
        seeds = g.input(f"{prefix}_seeds", [rows, 2], DType.U32)
        nxt = g.sample_per_row(logits, settings, seeds, name=f"{prefix}_next")
    elif sampler and sampler.get("temperature", 0) > 0:
        seed = g.input(f"{prefix}_seed", [2], DType.U32)
        nxt = g.sample(logits, sampler["temperature"], sampler.get("top_k", 0), sampler.get("top_p", 1.0),
                       seed_input=seed, name=f"{prefix}_next")
    else:
        nxt = g.argmax(logits, name=f"{prefix}_next")
    g.output(nxt)


def _ropes(g: Graph, cfg: TransformerConfig) -> tuple[_Rope, _Rope]:
    """The (global, sliding-window) RoPE tables; the same pair when the bases agree."""
    cos, sin = rope_tables(cfg)
    ropes = [_Rope(g.constant(cos, name="rope_cos"), g.constant(sin, name="rope_sin"))]
    local = cfg.features.rope_theta_local
    if local and local != cfg.rope_theta and any(cfg.features.sliding(i) for i in range(cfg.layers)):
        cos, sin = rope_tables(cfg, local)
        ropes.append(_Rope(g.constant(cos, name="rope_cos_local"), g.constant(sin, name="rope_sin_local")))
    else:
        ropes.append(ropes[0])
    return ropes[0], ropes[1]


def build_batched_decoder(cfg: TransformerConfig, slots: int, chunk: int = 32) -> Graph:
    """The continuous-batching graph: ``slots`` sequences decode together, each in its own region of
    the KV caches (``blk.{i}.slots.{k,v}_cache``, ``context`` rows per slot).

    Branches: ``prefill`` (``chunk`` tokens of one sequence into the one-sequence caches
    ``blk.{i}.{k,v}_cache``, as in :func:`build_transformer`); ``admit`` (copies those caches into
    slot ``admit_pos / context``: input ``admit_pos`` = slot * context, output ``admit_done``); ``batch``
    (one token per slot: ``batch_tokens`` / ``batch_pos`` i32[slots], outputs ``batch_logits``
    [slots, vocab] and ``batch_next``). Both token-picking branches sample per row
    (``{branch}_settings`` = (temperature, top_k, top_p) rows, ``{branch}_seeds``); temperature 0 is
    argmax, the token :func:`build_transformer`'s greedy graph picks."""
    cfg.check()
    if slots < 1:
        raise GraphError(f"batched decoder: {slots} slots (give at least 1)")
    g = Graph("transformer_batched")
    ropes = _ropes(g, cfg)
    weights = _Weights(g, cfg)
    _branch(g, weights, cfg, "prefill", chunk, ropes, None, per_row=True)
    _branch(g, weights, cfg, "batch", slots, ropes, None, slots=slots, per_row=True)
    at = g.input("admit_pos", [1], DType.I32)
    firsts = []
    for layer in range(cfg.layers):
        for kind in ("k", "v"):
            name = f"blk.{layer}.{kind}_cache"
            copied = g.cache_write(weights.kv_cache(name, slots), weights.kv_cache(name), at,
                                   name=f"admit.{layer}.{kind}")
            # a one-row read of each copy makes the admit run (and wait for) all of them
            firsts.append(g.narrow(copied, 0, 0, 1, name=f"admit.{layer}.{kind}_row"))
    g.output(g.concat(firsts, axis=0, name="admit_done"))
    return g


def build_transformer(cfg: TransformerConfig, chunk: int = 32, sampler: dict | None = None) -> Graph:
    """The prefill (``chunk`` tokens) + decode (1 token) graph; see the module docstring."""
    cfg.check()
    g = Graph("transformer")
    ropes = _ropes(g, cfg)
    weights = _Weights(g, cfg)
    _branch(g, weights, cfg, "prefill", chunk, ropes, sampler)
    _branch(g, weights, cfg, "decode", 1, ropes, sampler)
    return g

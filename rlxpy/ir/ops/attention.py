"""Attention family: Attention; PackedAttention (made by the packed-BSHD
pattern: it reads q, k and v in place from one parent); and the composites FusedAttentionBlock and
FusedTransformerLayer, which the unfuse pass expands.

Documented in docs/ops.md#attention (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import ActKind, MaskKind, Op, TensorType, need, need_static
from rlxpy.ir.shape import Sym, format_shape


def attention_layout(t: TensorType, heads: int, head_dim: int) -> str:
    """'bhsd' ([B,H,S,D]), 'bshd' ([B,S,H,D]), 'bs(hd)' ([B,S,H*D]) or 'hsd' ([B*H,S,D])."""
    if t.rank == 4:
        return "bhsd" if t.shape[1] == heads else "bshd"
    if t.rank == 3:
        return "bs(hd)" if t.shape[2] == heads * head_dim else "hsd"
    need(False, f"attention tensors must be rank 3 or 4, got {t}")
    return ""


@dataclass(frozen=True)
class Attention(Op):
    """softmax(mask(scale * q k^T)) v per head; inputs q, k, v (+ mask for CUSTOM/BIAS).

    scale = score_scale or 1/sqrt(head_dim); softcap s <- c*tanh(s/c) before masking. GQA: K/V
    have ``num_kv_heads`` heads, query head h reads kv head h // (num_heads // num_kv_heads).
    CAUSAL/SLIDING_WINDOW are bottom-right aligned (query i sits at S_k - S_q + i), like
    torch's ``is_causal`` only when S_q == S_k, and like llama.cpp's KV-cache decode otherwise.
    A fully masked row averages V uniformly (masked scores are a large finite negative)."""

    num_heads: int
    head_dim: int
    num_kv_heads: int = 0  # 0 = num_heads
    mask_kind: MaskKind = MaskKind.NONE
    score_scale: float | None = None
    softcap: float | None = None
    window: int = 0
    #: KV-cache mode: the last input is pos (i32[1]) and only keys [0, pos + S_q) exist; with
    #: CAUSAL, query i sits at pos + i. Work is proportional to pos + S_q, not to k's length.
    #: pos i32[B] (one per batch entry, B > 1: batched decode) gives batch b its own pos[b].
    dynamic_kv: bool = False
    arity = (3, 5)

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        q, k, v = ins[:3]
        if self.dynamic_kv:
            pos = ins[-1]
            need(pos.rank == 1 and pos.shape[0] in (1, q.shape[0]) and pos.dtype in (DType.I32, DType.U32),
                 f"dynamic_kv needs a last input pos i32[1] or i32[batch {q.shape[0]}], got {ins[-1]}")
            ins = ins[:-1]
        need(self.num_heads % self.kv_heads == 0,
             f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.kv_heads}")
        needs_mask = self.mask_kind in (MaskKind.CUSTOM, MaskKind.BIAS)
        need(len(ins) == (4 if needs_mask else 3),
             f"mask kind {self.mask_kind.name} takes {4 if needs_mask else 3} inputs, got {len(ins)}")
        lq = attention_layout(q, self.num_heads, self.head_dim)
        lk = attention_layout(k, self.kv_heads, self.head_dim)
        lv = attention_layout(v, self.kv_heads, self.head_dim)
        need(q.rank == k.rank == v.rank, f"q, k, v ranks differ: {q}, {k}, {v}")
        need(lk == lv and k.shape == v.shape, f"k {k} and v {v} must share a layout")
        need(lq == lk or {lq, lk} <= {"bshd", "bhsd"} or q.rank == 3,
             f"q {q} and k {k} layouts differ ({lq} vs {lk})")
        need(q.shape[-1] in (self.head_dim, self.num_heads * self.head_dim)
             and k.shape[-1] in (self.head_dim, self.kv_heads * self.head_dim),
             f"head_dim {self.head_dim} does not match q {q} / k {k}")
        if needs_mask:  # [B, S_k], [B, S_q, S_k] or [B, H, S_q, S_k] (size-1 dims broadcast)
            mask, keys = ins[3], k.shape[2] if lk == "bhsd" else k.shape[1]
            need(mask.rank in (2, 3, 4) and mask.shape[-1] in (1, keys),
                 f"{self.mask_kind.name} mask {mask} must be [B, S_k], [B, S_q, S_k] or [B, H, S_q, S_k] "
                 f"with S_k = {keys}")
        return TensorType(q.shape, q.dtype)


@dataclass(frozen=True)
class PackedAttention(Attention):
    """Attention whose q, k and v are read in place from one packed parent: the parent's rows are
    the B*S tokens (row width ``row``), q is the column run [q_col, q_col + heads*D) of each row,
    k and v the runs [k_col, ...) and [v_col, ...) of kv_heads*D columns, each read as BSHD. Inputs:
    parent (any shape with B*S*row elements), then the mask for CUSTOM/BIAS. Output [B, S, heads*D].
    Same semantics as Attention on the three slices (self-attention: S_q = S_k = S)."""

    batch: int = 1
    seq: int = 1
    row: int = 0
    q_col: int = 0
    k_col: int = 0
    v_col: int = 0
    arity = (1, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        parent = ins[0]
        need(not self.dynamic_kv, "packed attention has no KV cache (dynamic_kv)")
        needs_mask = self.mask_kind in (MaskKind.CUSTOM, MaskKind.BIAS)
        need(len(ins) == (2 if needs_mask else 1), f"mask kind {self.mask_kind.name} takes "
             f"{2 if needs_mask else 1} inputs, got {len(ins)}")
        need(self.num_heads % self.kv_heads == 0,
             f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.kv_heads}")
        need_static(parent.shape, "packed attention")
        rows = self.batch * self.seq
        need(not any(isinstance(d, Sym) for d in parent.shape) and math.prod(parent.shape) == rows * self.row,
             f"parent {parent} is not {self.batch} x {self.seq} rows of {self.row}")
        q_width, kv_width = self.num_heads * self.head_dim, self.kv_heads * self.head_dim
        for name, col, width in (("q", self.q_col, q_width), ("k", self.k_col, kv_width),
                                 ("v", self.v_col, kv_width)):
            need(0 <= col and col + width <= self.row, f"{name} columns {col}:{col + width} exceed the "
                 f"row of {self.row}")
        if needs_mask:
            mask = ins[1]
            need(mask.rank in (2, 3, 4) and mask.shape[-1] in (1, self.seq),
                 f"{self.mask_kind.name} mask {mask} must end in S_k = {self.seq}")
        return TensorType((self.batch, self.seq, q_width), parent.dtype)

    def unpacked(self) -> Attention:
        """The plain Attention this op stands for."""
        return Attention(self.num_heads, self.head_dim, self.num_kv_heads, self.mask_kind,
                         self.score_scale, self.softcap, self.window)


def bshd_layout(t: TensorType, heads: int, head_dim: int) -> bool:
    """True when an attention input is read token-major ([B,S,H,D] or [B,S,H*D]), as Attention reads it."""
    return t.rank in (3, 4) and attention_layout(t, heads, head_dim) in ("bshd", "bs(hd)")


# -- transformer blocks -------------------------------------------------------------------------
def _check_mask(mask: TensorType, batch: Any, heads: int, seq: Any) -> None:
    allowed = [(batch, seq), (batch, seq, seq), (batch, heads, seq, seq)]
    need(tuple(mask.shape) in allowed,
         f"mask {mask} must be [B, S], [B, S, S] or [B, H, S, S] = "
         + " or ".join(format_shape(s) for s in allowed))


def _check_attention_weights(ins: Sequence[TensorType], heads: int, head_dim: int) -> tuple[Any, Any, Any]:
    """hidden [B, S, E], qkv_w [E, 3·H·D], out_w [H·D, E]; returns (B, S, E)."""
    hidden, qkv_w, out_w = ins
    need(heads >= 1 and head_dim >= 1, f"num_heads {heads} and head_dim {head_dim} must be >= 1")
    need(hidden.rank == 3 and hidden.dtype.is_float, f"hidden must be a float [B, S, E], got {hidden}")
    batch, seq, embed = hidden.shape
    width = heads * head_dim
    need(qkv_w.shape == (embed, 3 * width), f"qkv_w must be [{embed}, {3 * width}], got {qkv_w}")
    need(out_w.shape == (width, embed), f"out_w must be [{width}, {embed}], got {out_w}")
    return batch, seq, embed


def _check_vector(t: TensorType, size: Any, what: str) -> None:
    need(t.shape == (size,), f"{what} must be [{size}], got {t}")


@dataclass(frozen=True)
class FusedAttentionBlock(Op):
    """Multi-head self-attention block with a binary keep-mask (entries < 0.5 masked, as
    Attention CUSTOM). Inputs: ``hidden [B,S,E], qkv_w [E,3·H·D], out_w [H·D,E], mask``, then
    ``qkv_b [3·H·D], out_b [E]`` if has_bias, then ``cos, sin [P, D/2]`` if has_rope (P >= S).

    q|k|v = hidden @ qkv_w (+ qkv_b), split on the last axis; with RoPE q and k rotate per head
    (rotate-half / NeoX, positions 0..S-1, all D dims); per head ``softmax(q kᵀ / sqrt(D)) v``;
    heads concatenated @ out_w (+ out_b). Matches transformers' BertSelfAttention + BertSelfOutput
    dense (no LayerNorm) with a keep-mask, and GPT-NeoX attention with rotary_pct = 1."""

    num_heads: int
    head_dim: int
    has_bias: bool = False
    has_rope: bool = False
    arity = (4, 8)
    composite = True

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        want = 4 + 2 * self.has_bias + 2 * self.has_rope
        need(len(ins) == want, f"takes {want} inputs (has_bias={self.has_bias}, has_rope={self.has_rope}): "
             "hidden, qkv_w, out_w, mask" + (", qkv_b, out_b" if self.has_bias else "")
             + (", cos, sin" if self.has_rope else ""))
        hidden, qkv_w, out_w, mask = ins[:4]
        batch, seq, embed = _check_attention_weights([hidden, qkv_w, out_w], self.num_heads, self.head_dim)
        _check_mask(mask, batch, self.num_heads, seq)
        rest = list(ins[4:])
        if self.has_bias:
            _check_vector(rest.pop(0), 3 * self.num_heads * self.head_dim, "qkv_b")
            _check_vector(rest.pop(0), embed, "out_b")
        if self.has_rope:
            cos, sin = rest
            need(self.head_dim % 2 == 0, f"rope needs an even head_dim, got {self.head_dim}")
            need(cos.shape == sin.shape and cos.rank == 2 and cos.shape[1] == self.head_dim // 2,
                 f"cos/sin must be [max_pos, {self.head_dim // 2}], got {cos} and {sin}")
            positions = cos.shape[0]
            need(isinstance(positions, Sym) or isinstance(seq, Sym) or positions >= seq,
                 f"cos/sin have {positions} positions, the sequence has {seq}")
        return hidden


# Input order of FusedTransformerLayer. Without bias the four linear biases are dropped and the
# LayerNorm betas stay (BERT's LayerNorms are affine whatever its linears do): 10 inputs, as the
# op declares.
LAYER_INPUTS_BIAS = ("hidden", "qkv_w", "qkv_b", "out_w", "out_b", "ln1_g", "ln1_b", "fc1_w", "fc1_b",
                     "fc2_w", "fc2_b", "ln2_g", "ln2_b", "mask")


LAYER_INPUTS_NO_BIAS = tuple(n for n in LAYER_INPUTS_BIAS if n not in ("qkv_b", "out_b", "fc1_b", "fc2_b"))


@dataclass(frozen=True)
class FusedTransformerLayer(Op):
    """BERT post-norm encoder layer (transformers' BertLayer, eval mode):
    ``h1 = LayerNorm(hidden + Attn(hidden), eps1)``; ``out = LayerNorm(h1 + act(h1 @ fc1_w + fc1_b)
    @ fc2_w + fc2_b, eps2)``, where Attn is FusedAttentionBlock without RoPE (keep-mask < 0.5).
    Inputs: LAYER_INPUTS_BIAS (14) if has_bias, else LAYER_INPUTS_NO_BIAS (10: the linear biases
    dropped, the LayerNorm betas kept). ``activation`` defaults to exact-erf GELU (BERT's "gelu")."""

    num_heads: int
    head_dim: int
    intermediate_size: int
    eps1: float = 1e-12
    eps2: float = 1e-12
    activation: ActKind = ActKind.GELU
    has_bias: bool = True
    arity = (10, 14)
    composite = True

    def input_names(self) -> tuple[str, ...]:
        return LAYER_INPUTS_BIAS if self.has_bias else LAYER_INPUTS_NO_BIAS

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        names = self.input_names()
        need(len(ins) == len(names),
             f"takes {len(names)} inputs (has_bias={self.has_bias}): {', '.join(names)}")
        t = dict(zip(names, ins))
        batch, seq, embed = _check_attention_weights([t["hidden"], t["qkv_w"], t["out_w"]], self.num_heads,
                                                     self.head_dim)
        _check_mask(t["mask"], batch, self.num_heads, seq)
        inner = self.intermediate_size
        need(t["fc1_w"].shape == (embed, inner), f"fc1_w must be [{embed}, {inner}], got {t['fc1_w']}")
        need(t["fc2_w"].shape == (inner, embed), f"fc2_w must be [{inner}, {embed}], got {t['fc2_w']}")
        sizes = {"qkv_b": 3 * self.num_heads * self.head_dim, "out_b": embed, "fc1_b": inner, "fc2_b": embed,
                 "ln1_g": embed, "ln1_b": embed, "ln2_g": embed, "ln2_b": embed}
        for name, size in sizes.items():
            if name in t:
                _check_vector(t[name], size, name)
        return t["hidden"]

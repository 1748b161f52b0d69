"""Attention and rotary embedding (op-catalog §1.7)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.core import MaskKind, Op, TensorType, need
from rlxpy.ir.shape import Sym


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
    dynamic_kv: bool = False
    arity = (3, 5)

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        q, k, v = ins[:3]
        if self.dynamic_kv:
            need(ins[-1].shape == (1,) and ins[-1].dtype in (DType.I32, DType.U32),
                 f"dynamic_kv needs a last input pos i32[1], got {ins[-1]}")
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
class Rope(Op):
    """Rotary embedding of x [..., S, L] (L = heads*head_dim), sequence on the second-to-last axis.

    cos/sin tables are [max_pos, n_rot/2]; position of row s = s + position_offset (+ the value of
    an optional 4th input, an i32[1] offset, for KV-cache decoding). Half-split ("NeoX",
    transformers' rotate_half) pairs (i, i + n_rot/2); interleaved ("GPT-J", llama.cpp's
    LLAMA rope) pairs (2i, 2i+1). Dims >= n_rot pass through."""

    head_dim: int
    n_rot: int = 0  # 0 = head_dim
    interleaved: bool = False
    position_offset: int = 0
    arity = (3, 4)

    @property
    def rot(self) -> int:
        return self.n_rot or self.head_dim

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, cos, sin = ins[:3]
        need(x.rank >= 2, f"rope needs x [..., S, L], got {x}")
        last = x.shape[-1]
        need(isinstance(last, Sym) or last % self.head_dim == 0, f"last dim of {x} is not a multiple of "
             f"head_dim {self.head_dim}")
        need(self.rot % 2 == 0 and self.rot <= self.head_dim, f"n_rot {self.rot} must be even, <= head_dim")
        need(cos.shape == sin.shape and cos.rank == 2 and cos.shape[1] == self.rot // 2,
             f"cos/sin must be [max_pos, {self.rot // 2}], got {cos} and {sin}")
        if len(ins) == 4:
            need(ins[3].shape == (1,) and ins[3].dtype in (DType.I32, DType.U32),
                 f"position input must be i32[1], got {ins[3]}")
        seq, max_pos = x.shape[-2], cos.shape[0]
        if isinstance(seq, int) and isinstance(max_pos, int):
            need(self.position_offset + seq <= max_pos,
                 f"positions {self.position_offset}..{self.position_offset + seq - 1} exceed the "
                 f"{max_pos}-row cos/sin tables")
        return x


@dataclass(frozen=True)
class CacheWrite(Op):
    """Write ``rows`` [S, ...] into ``cache`` [L, ...] at row ``pos`` (an i32[1] tensor read at run
    time) IN PLACE: the output aliases the cache, so a Param cache keeps the rows across runs (a
    KV cache). Rows that would land at or past L are dropped."""

    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        cache, rows, pos = ins
        need(cache.rank >= 1 and rows.rank == cache.rank and tuple(rows.shape[1:]) == tuple(cache.shape[1:]),
             f"rows {rows} must be [S, {', '.join(str(d) for d in cache.shape[1:])}] for cache {cache}")
        need(rows.dtype == cache.dtype, f"rows {rows} and cache {cache} dtypes differ")
        need(pos.shape == (1,) and pos.dtype in (DType.I32, DType.U32), f"pos must be i32[1], got {pos}")
        return cache


@dataclass(frozen=True)
class RopeKvAppend(Op):
    """One step of a decoder's attention input: split a fused QKV row block ``qkv`` [S, Wq+2*Wkv]
    into q, k, v; rotate q and k (as Rope, positions pos + s); append k and v to the caches at row
    pos IN PLACE (as CacheWrite); output the rotated q [S, Wq]. Inputs: qkv, k_cache, v_cache,
    cos, sin, pos. The caches are updated as a side effect: consumers must read them after this
    node (the llama builder makes attention depend on its output)."""

    head_dim: int
    q_width: int
    kv_width: int
    n_rot: int = 0
    interleaved: bool = False
    arity = (6, 6)

    @property
    def rot(self) -> int:
        return self.n_rot or self.head_dim

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        qkv, k_cache, v_cache, cos, sin, pos = ins
        width = self.q_width + 2 * self.kv_width
        need(qkv.rank == 2 and qkv.shape[1] == width, f"qkv must be [S, {width}], got {qkv}")
        for cache in (k_cache, v_cache):
            need(cache.rank == 2 and cache.shape[1] == self.kv_width and cache.dtype == qkv.dtype,
                 f"caches must be [L, {self.kv_width}] {qkv.dtype}, got {cache}")
        need(self.q_width % self.head_dim == 0 and self.kv_width % self.head_dim == 0,
             f"widths {self.q_width}/{self.kv_width} are not multiples of head_dim {self.head_dim}")
        need(self.rot % 2 == 0 and self.rot <= self.head_dim, f"n_rot {self.rot} must be even, <= head_dim")
        need(cos.shape == sin.shape and cos.rank == 2 and cos.shape[1] == self.rot // 2,
             f"cos/sin must be [max_pos, {self.rot // 2}], got {cos} and {sin}")
        need(pos.shape == (1,) and pos.dtype in (DType.I32, DType.U32), f"pos must be i32[1], got {pos}")
        return TensorType((qkv.shape[0], self.q_width), qkv.dtype)

"""Rope family: rotary position embedding, alone or fused with the KV-cache append.

Documented in docs/ops.md#rope (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, TensorType, need
from rlxpy.ir.shape import Sym


@dataclass(frozen=True)
class Rope(Op):
    """Rotary embedding of x [..., S, L] (L = heads*head_dim), sequence on the second-to-last axis.

    cos/sin tables are [max_pos, n_rot/2]; position of row s = s + position_offset (+ the value of
    an optional 4th input, an i32[1] offset, for KV-cache decoding; an i32[N] input, N the product
    of x's dims before S, gives each [S, L] block its own offset: batched decode). Half-split ("NeoX",
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
            blocks = 1
            for d in x.shape[:-2]:
                blocks = blocks * d if isinstance(d, int) and isinstance(blocks, int) else None
            pos = ins[3]
            need(pos.rank == 1 and pos.shape[0] in (1, blocks) and pos.dtype in (DType.I32, DType.U32),
                 f"position input must be i32[1] or one per [S, L] block i32[{blocks}], got {ins[3]}")
        seq, max_pos = x.shape[-2], cos.shape[0]
        if isinstance(seq, int) and isinstance(max_pos, int):
            need(self.position_offset + seq <= max_pos,
                 f"positions {self.position_offset}..{self.position_offset + seq - 1} exceed the "
                 f"{max_pos}-row cos/sin tables")
        return x


@dataclass(frozen=True)
class RopeKvAppend(Op):
    """One step of a decoder's attention input: split a fused QKV row block ``qkv`` [S, Wq+2*Wkv]
    into q, k, v; rotate q and k (as Rope, positions pos + s); append k and v to the caches at row
    pos IN PLACE (as CacheWrite); output the rotated q [S, Wq]. Inputs: qkv, k_cache, v_cache,
    cos, sin, pos. The caches are updated as a side effect: consumers must read them after this
    node (the llama builder makes attention depend on its output).

    Batched decode: pos i32[S] (S > 1) gives each row its own position, and the caches' L rows
    are S slots of L/S rows each: row s rotates at position pos[s] and appends to row
    s * (L/S) + pos[s] (dropped when pos[s] >= L/S). With S = 1 both forms agree."""

    head_dim: int
    q_width: int
    kv_width: int
    n_rot: int = 0
    interleaved: bool = False
    arity = (6, 6)

    @property
    def rot(self) -> int:
        return self.n_rot or self.head_dim

    def mutated_inputs(self) -> tuple[int, ...]:
        return (1, 2)  # k_cache, v_cache

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
        rows = qkv.shape[0]
        need(pos.shape in ((1,), (rows,)) and pos.dtype in (DType.I32, DType.U32),
             f"pos must be i32[1] or one per row i32[{rows}], got {pos}")
        if pos.shape == (rows,) and rows != 1:
            need(isinstance(rows, int) and isinstance(k_cache.shape[0], int) and k_cache.shape[0] % rows == 0,
                 f"per-row positions: the caches' {k_cache.shape[0]} rows are not {rows} equal slots")
        return TensorType((rows, self.q_width), qkv.dtype)

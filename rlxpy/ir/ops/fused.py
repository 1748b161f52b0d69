"""Ops made by the transformer pattern pass (ir/passes/patterns_transformer.py).

The IR has one output per node, yet a fused step often produces several results (q, k and v;
a residual sum and its norm). Such an op writes ONE *blocked* tensor whose parts are contiguous
runs, and the pattern pass hands each part to its consumers as a contiguous Narrow + Reshape:
the planner makes those views (arena.is_view), so no copy step runs and no second output slot is
needed. PackedAttention is the other direction: it reads its three inputs in place from one parent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.ops.attention import Attention, attention_layout
from rlxpy.ir.ops.core import ActKind, MaskKind, Op, TensorType, need
from rlxpy.ir.shape import Sym


def _static(shape: Sequence, what: str) -> None:
    need(all(isinstance(d, int) for d in shape), f"{what} needs static dims, got {list(shape)}")


@dataclass(frozen=True)
class SplitMatMul(Op):
    """``act(x @ w (+ bias))`` with its N columns cut into parts of ``widths``, stored part after
    part: part p is a contiguous [rows, widths[p]] block, rows = the product of x's leading dims.
    Output: 1-D [rows * N]. The split-QKV pattern uses it so that q, k and v are views."""

    widths: tuple[int, ...]
    activation: ActKind | None = None
    has_bias: bool = False
    arity = (2, 3)

    def part_offsets(self, rows: int) -> list[int]:
        """Element offset of each part inside the output."""
        offsets, at = [], 0
        for width in self.widths:
            offsets.append(at)
            at += rows * width
        return offsets

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w = ins[:2]
        need(len(ins) == (3 if self.has_bias else 2), f"takes {3 if self.has_bias else 2} inputs")
        need(w.rank == 2 and x.rank >= 2 and x.shape[-1] == w.shape[0], f"split matmul wants x [.., K] and "
             f"w [K, N], got {x} x {w}")
        _static(x.shape, "split matmul")
        need(len(self.widths) >= 2 and min(self.widths) > 0 and sum(self.widths) == w.shape[1],
             f"widths {self.widths} must be positive and add up to N = {w.shape[1]}")
        if self.has_bias:
            need(ins[2].shape == (w.shape[1],), f"bias must be [{w.shape[1]}], got {ins[2]}")
        return TensorType((math.prod(x.shape[:-1]) * w.shape[1],), x.dtype)


@dataclass(frozen=True)
class ResidualNormTee(Op):
    """``s = x + residual`` and ``y = norm(s)`` in one step, stored as [2, *x.shape]: [0] = s (the
    "tee", for the residual stream's later readers), [1] = y. norm is LayerNorm (``rms=False``:
    centred, biased variance) or RmsNorm (``rms=True``), times gamma, plus beta when given.
    Inputs: x, residual, gamma[H], [beta[H]]."""

    rms: bool = False
    eps: float = 1e-5
    arity = (3, 4)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, residual = ins[:2]
        need(x.shape == residual.shape and x.dtype == residual.dtype,
             f"x {x} and residual {residual} differ")
        need(x.rank >= 1, "residual norm needs rank >= 1")
        for t in ins[2:]:
            need(t.shape == (x.shape[-1],), f"gamma/beta must be [{x.shape[-1]}], got {t}")
        return TensorType((2, *x.shape), x.dtype)


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
        _static(parent.shape, "packed attention")
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

"""Matmul family: matrix products. SplitMatMul is made by the split-QKV pattern
(its output is one blocked tensor, see norm.ResidualNormTee); DotGeneral, LoraMatMul and FusedSwiGLU
are composites that the unfuse pass expands.

Documented in docs/ops.md#matmul (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import ActKind, Op, TensorType, need, need_static
from rlxpy.ir.shape import Shape


def matmul_shape(a: TensorType, b: TensorType) -> Shape:
    """Shapes accepted: [M,K]x[K,N]; [...,M,K]x[K,N]; [L...,M,K]x[L...,K,N] (same leading dims)."""
    need(a.rank >= 2 and b.rank >= 2, f"matmul needs rank >= 2, got {a} x {b}")
    need(a.shape[-1] == b.shape[-2], f"matmul inner dims differ: {a} x {b}")
    if b.rank == 2:
        return tuple(a.shape[:-1]) + (b.shape[-1],)
    need(a.rank == b.rank and a.shape[:-2] == b.shape[:-2],
         f"batched matmul needs identical leading dims: {a} x {b}")
    return tuple(a.shape[:-1]) + (b.shape[-1],)


def swap_last(t: TensorType) -> TensorType:
    """``t`` with its last two dims swapped (a matrix transposed)."""
    return TensorType(tuple(t.shape[:-2]) + (t.shape[-1], t.shape[-2]), t.dtype)


@dataclass(frozen=True)
class MatMul(Op):
    """``a @ b`` in f32 accumulation, like torch.matmul on the accepted shape combos. ``transpose_a`` /
    ``transpose_b``: the operand's last two dims are swapped first (``a.mT @ b``, ``a @ b.mT``), read in
    place without a transposed copy (the gradients' ``x^T dy`` and ``dy w^T``); a transposed ``a`` needs
    ``b`` of the same rank (its rows are not folded)."""

    transpose_a: bool = False
    transpose_b: bool = False
    arity = (2, 2)

    def operand_types(self, ins: Sequence[TensorType]) -> tuple[TensorType, TensorType]:
        """The types of the two matrices multiplied (after the transposes)."""
        a, b = ins
        need(a.rank >= 2 and b.rank >= 2, f"matmul needs rank >= 2, got {a} x {b}")
        need(not self.transpose_a or a.rank == b.rank, f"a transposed a needs b of its rank, got {a} x {b}")
        return swap_last(a) if self.transpose_a else a, swap_last(b) if self.transpose_b else b

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return TensorType(matmul_shape(*self.operand_types(ins)), ins[0].dtype)


@dataclass(frozen=True)
class FusedMatMulBiasAct(Op):
    """``act(x @ w + bias)``; bias [N] broadcast over rows; every activation is honoured."""

    activation: ActKind | None = None
    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w, bias = ins
        need(w.rank == 2, f"fused matmul weight must be 2-D, got {w}")
        need(bias.shape == (w.shape[1],), f"bias must be [{w.shape[1]}], got {bias}")
        return TensorType(matmul_shape(x, w), x.dtype)


@dataclass(frozen=True)
class GroupedMatMul(Op):
    """MoE GEMM: ``out[i] = x[i] @ w[trunc(expert_idx[i])]``; a row whose id is outside [0, E) (for float
    ids NaN and +-inf too) is zero. Ids may be i32, u32, i64 or f32."""

    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w, idx = ins
        need(x.rank == 2 and w.rank == 3 and w.shape[1] == x.shape[1] and idx.shape == (x.shape[0],),
             f"grouped matmul wants x [M,K], w [E,K,N], idx [M]; got {x}, {w}, {idx}")
        return TensorType((x.shape[0], w.shape[2]), x.dtype)


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
        need_static(x.shape, "split matmul")
        need(len(self.widths) >= 2 and min(self.widths) > 0 and sum(self.widths) == w.shape[1],
             f"widths {self.widths} must be positive and add up to N = {w.shape[1]}")
        if self.has_bias:
            need(ins[2].shape == (w.shape[1],), f"bias must be [{w.shape[1]}], got {ins[2]}")
        return TensorType((math.prod(x.shape[:-1]) * w.shape[1],), x.dtype)


# -- linear algebra -----------------------------------------------------------------------------
def _check_dims(dims: Sequence[int], rank: int, what: str) -> None:
    need(len(set(dims)) == len(dims) and all(0 <= d < rank for d in dims),
         f"{what} {tuple(dims)} must be distinct axes in [0, {rank})")


@dataclass(frozen=True)
class DotGeneral(Op):
    """XLA's dot_general: contract ``lhs_contracting`` with ``rhs_contracting`` pairwise, with
    ``lhs_batch``/``rhs_batch`` as shared batch axes. Output = batch dims (lhs order), then lhs
    free dims, then rhs free dims, each in their original order; like ``numpy.einsum`` /
    ``torch.tensordot`` (with batch axes) and ``jax.lax.dot_general``. Axes must be non-negative."""

    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()
    arity = (2, 2)
    composite = True

    def __post_init__(self) -> None:  # JSON and callers may hand lists: keep the op hashable
        for field in ("lhs_contracting", "rhs_contracting", "lhs_batch", "rhs_batch"):
            object.__setattr__(self, field, tuple(int(d) for d in getattr(self, field)))

    def free_dims(self, lhs_rank: int, rhs_rank: int) -> tuple[list[int], list[int]]:
        lhs_used = set(self.lhs_contracting) | set(self.lhs_batch)
        rhs_used = set(self.rhs_contracting) | set(self.rhs_batch)
        lhs_free = [d for d in range(lhs_rank) if d not in lhs_used]
        return lhs_free, [d for d in range(rhs_rank) if d not in rhs_used]

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        lhs, rhs = ins
        need(lhs.dtype == rhs.dtype, f"lhs {lhs} and rhs {rhs} dtypes differ")
        need(len(self.lhs_contracting) == len(self.rhs_contracting),
             f"lhs_contracting {self.lhs_contracting} and rhs_contracting {self.rhs_contracting} "
             "differ in length")
        need(len(self.lhs_batch) == len(self.rhs_batch),
             f"lhs_batch {self.lhs_batch} and rhs_batch {self.rhs_batch} differ in length")
        _check_dims(self.lhs_contracting + self.lhs_batch, lhs.rank, "lhs contracting + batch axes")
        _check_dims(self.rhs_contracting + self.rhs_batch, rhs.rank, "rhs contracting + batch axes")
        for kind, lhs_dims, rhs_dims in (("contracting", self.lhs_contracting, self.rhs_contracting),
                                         ("batch", self.lhs_batch, self.rhs_batch)):
            for a, b in zip(lhs_dims, rhs_dims):
                need(lhs.shape[a] == rhs.shape[b], f"{kind} sizes differ: lhs axis {a} is {lhs.shape[a]}, "
                     f"rhs axis {b} is {rhs.shape[b]} ({lhs} x {rhs})")
        lhs_free, rhs_free = self.free_dims(lhs.rank, rhs.rank)
        shape = ([lhs.shape[d] for d in self.lhs_batch] + [lhs.shape[d] for d in lhs_free]
                 + [rhs.shape[d] for d in rhs_free])
        return TensorType(tuple(shape), lhs.dtype)


@dataclass(frozen=True)
class LoraMatMul(Op):
    """``x @ w + scale * ((x @ a) @ b)``; inputs x [..., M, K], w [K, N], a [K, R], b [R, N]
    (peft's LoRA Linear with scale = lora_alpha / r, without dropout)."""

    scale: float = 1.0
    arity = (4, 4)
    composite = True

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w, a, b = ins
        need(x.rank >= 2 and w.rank == a.rank == b.rank == 2,
             f"lora wants x [..., M, K], w [K, N], a [K, R], b [R, N]; got {x}, {w}, {a}, {b}")
        k, n, r = x.shape[-1], w.shape[1], a.shape[1]
        need(w.shape[0] == k and a.shape[0] == k and b.shape == (r, n),
             f"lora shapes disagree: x {x}, w {w}, a {a}, b {b} (want w [K, N], a [K, R], b [R, N])")
        need(len({x.dtype, w.dtype, a.dtype, b.dtype}) == 1 and x.dtype.is_float,
             f"lora inputs must share one float dtype: {x}, {w}, {a}, {b}")
        return TensorType(tuple(x.shape[:-1]) + (n,), x.dtype)


@dataclass(frozen=True)
class FusedSwiGLU(Op):
    """Split x [..., 2N] into halves; ``up * silu(gate)`` -> [..., N], then Cast to ``cast_to``.

    ``gate_first=True``: gate = first half, up = second (ggml_swiglu, Phi-3's gate_up_proj);
    ``gate_first=False``: up = first half, gate = second."""

    gate_first: bool = True
    cast_to: DType | None = None
    composite = True

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank >= 1 and x.dtype.is_float, f"swiglu needs a float tensor of rank >= 1, got {x}")
        last = x.shape[-1]
        need(isinstance(last, int) and last % 2 == 0, f"swiglu's last dim must be static and even, got {x}")
        return TensorType(tuple(x.shape[:-1]) + (last // 2,), self.cast_to or x.dtype)  # type: ignore[operator]

"""Matrix products, normalisation, reductions and selection (op-catalog §1.3-§1.5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.basic import _axis
from rlxpy.ir.ops.core import ActKind, Op, ReduceOp, TensorType, need
from rlxpy.ir.shape import Shape, Sym


def matmul_shape(a: TensorType, b: TensorType) -> Shape:
    """Shapes accepted: [M,K]x[K,N]; [...,M,K]x[K,N]; [L...,M,K]x[L...,K,N] (same leading dims)."""
    need(a.rank >= 2 and b.rank >= 2, f"matmul needs rank >= 2, got {a} x {b}")
    need(a.shape[-1] == b.shape[-2], f"matmul inner dims differ: {a} x {b}")
    if b.rank == 2:
        return tuple(a.shape[:-1]) + (b.shape[-1],)
    need(a.rank == b.rank and a.shape[:-2] == b.shape[:-2],
         f"batched matmul needs identical leading dims: {a} x {b}")
    return tuple(a.shape[:-1]) + (b.shape[-1],)


@dataclass(frozen=True)
class MatMul(Op):
    """``a @ b`` in f32 accumulation, like torch.matmul on the accepted shape combos."""

    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return TensorType(matmul_shape(*ins), ins[0].dtype)


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
    """MoE GEMM: ``out[i] = x[i] @ w[int(expert_idx[i])]``; rows with a bad expert id are zero."""

    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w, idx = ins
        need(x.rank == 2 and w.rank == 3 and w.shape[1] == x.shape[1] and idx.shape == (x.shape[0],),
             f"grouped matmul wants x [M,K], w [E,K,N], idx [M]; got {x}, {w}, {idx}")
        return TensorType((x.shape[0], w.shape[2]), x.dtype)


@dataclass(frozen=True)
class LayerNorm(Op):
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` over the last axis (biased var), like
    torch.nn.functional.layer_norm. With 2 inputs beta is 0."""

    eps: float = 1e-5
    axis: int = -1
    arity = (2, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return _norm_infer(ins, "layer_norm")


@dataclass(frozen=True)
class RmsNorm(Op):
    """``x / sqrt(mean(x^2) + eps) * gamma + beta`` over the last axis (beta optional, adds)."""

    eps: float = 1e-6
    axis: int = -1
    arity = (2, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return _norm_infer(ins, "rms_norm")


@dataclass(frozen=True)
class FusedResidualLN(Op):
    """``LayerNorm(x + residual (+ bias))``; inputs x, residual, [bias], gamma, beta."""

    has_bias: bool = False
    eps: float = 1e-5
    arity = (4, 5)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return _residual_infer(self.has_bias, ins)


@dataclass(frozen=True)
class FusedResidualRmsNorm(Op):
    """``RmsNorm(x + residual (+ bias))`` with beta added; inputs x, residual, [bias], gamma, beta."""

    has_bias: bool = False
    eps: float = 1e-6
    arity = (4, 5)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return _residual_infer(self.has_bias, ins)


def _norm_infer(ins: Sequence[TensorType], what: str) -> TensorType:
    x = ins[0]
    need(x.rank >= 1, f"{what} needs rank >= 1")
    hidden = x.shape[-1]
    for t in ins[1:]:
        need(t.shape == (hidden,), f"{what} gamma/beta must be [{hidden}], got {t}")
    return x


def _residual_infer(has_bias: bool, ins: Sequence[TensorType]) -> TensorType:
    need(len(ins) == (5 if has_bias else 4), f"takes {5 if has_bias else 4} inputs (has_bias={has_bias})")
    x, residual = ins[0], ins[1]
    need(x.shape == residual.shape, f"x {x} and residual {residual} differ")
    for t in ins[2:]:
        need(t.shape == (x.shape[-1],), f"bias/gamma/beta must be [{x.shape[-1]}], got {t}")
    return x


@dataclass(frozen=True)
class Reduce(Op):
    """Sum/mean/max/min/prod over contiguous ``axes``; NaN propagates like torch."""

    op: ReduceOp
    axes: tuple[int, ...]
    keep_dim: bool = False

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        axes = sorted({_axis(a, x.rank) for a in self.axes})
        need(bool(axes), "reduce needs at least one axis")
        need(axes == list(range(axes[0], axes[-1] + 1)), f"reduce axes {self.axes} must be contiguous")
        shape = [1 if i in axes else d for i, d in enumerate(x.shape) if self.keep_dim or i not in axes]
        return TensorType(tuple(shape), x.dtype)


@dataclass(frozen=True)
class Softmax(Op):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``, like torch.softmax."""

    axis: int = -1

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _axis(self.axis, ins[0].rank)
        return ins[0]


@dataclass(frozen=True)
class Cumsum(Op):
    """Inclusive (or exclusive: y[0] = 0) prefix sum along ``axis``, like torch.cumsum."""

    axis: int = -1
    exclusive: bool = False

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _axis(self.axis, ins[0].rank)
        return ins[0]


@dataclass(frozen=True)
class TopK(Op):
    """Indices (i32) of the k largest along the last axis, descending; ties -> smaller index first
    (torch.topk(sorted=True) with a stable order). Requires k <= last dim."""

    k: int

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank >= 1, "topk needs rank >= 1")
        last = x.shape[-1]
        need(self.k >= 1 and (isinstance(last, Sym) or self.k <= last), f"k={self.k} for last dim {last}")
        return TensorType(tuple(x.shape[:-1]) + (self.k,), DType.I32)


@dataclass(frozen=True)
class Argmax(Op):
    """First index of the maximum along the last axis (i32); NaN counts as the maximum (torch)."""

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank >= 1, "argmax needs rank >= 1")
        return TensorType(tuple(x.shape[:-1]), DType.I32)


@dataclass(frozen=True)
class Sample(Op):
    """One token id (i32) per row of logits [..., V]: temperature, top-k, top-p, then Gumbel-max
    with Threefry2x32-20 keyed by ``seed`` (op-catalog §1.5). An optional second input, a u32[2]
    (or i32[2]) tensor, overrides the seed per run. temperature 0 -> argmax (ties -> lowest index);
    temperature 1 with no filtering still samples (the original's greedy shortcut is not copied)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    arity = (1, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x = ins[0]
        need(x.rank >= 1, "sample needs rank >= 1")
        need(self.temperature >= 0 and 0 <= self.top_p <= 1 and self.top_k >= 0,
             f"temperature {self.temperature}, top_k {self.top_k}, top_p {self.top_p}")
        if len(ins) == 2:
            need(ins[1].shape == (2,), f"seed input must be [2], got {ins[1]}")
        return TensorType(tuple(x.shape[:-1]), DType.I32)



"""Norm family: LayerNorm, RMSNorm, their residual-fused forms and Softmax.

ResidualNormTee is made by the residual-norm pattern (ir/passes/patterns_transformer.py). The IR has
one output per node, so it writes ONE *blocked* tensor whose parts are contiguous runs, and the
pattern pass hands each part to its consumers as a contiguous Narrow + Reshape (planner views).

Documented in docs/ops.md#norm (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.ops.base import Op, TensorType, check_axis, need


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
class Softmax(Op):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``, like torch.softmax."""

    axis: int = -1

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        check_axis(self.axis, ins[0].rank)
        return ins[0]

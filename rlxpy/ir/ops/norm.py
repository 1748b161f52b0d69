"""Norm family: LayerNorm, RMSNorm, their residual-fused forms, Softmax, and the channel norms of
CNNs (GroupNorm, which is also instance norm, and inference BatchNorm).

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


def _channel_params(x: TensorType, params: Sequence[TensorType], what: str) -> int:
    """The static channel count C of x [N, C, *spatial]; every per-channel input must be f32-like [C]."""
    need(x.rank >= 2, f"{what} takes x [N, C, *spatial], got {x}")
    need(x.dtype.is_float, f"{what} needs a float input, got {x}")
    channels = x.shape[1]
    need(isinstance(channels, int), f"{what} needs a static channel dim, got {x}")
    for t in params:
        need(t.shape == (channels,) and t.dtype == x.dtype,
             f"{what}: per-channel inputs must be {x.dtype}[{channels}], got {t}")
    return channels  # type: ignore[return-value]


@dataclass(frozen=True)
class GroupNorm(Op):
    """torch.nn.functional.group_norm: x [N, C, *spatial] (rank >= 2) in ``groups`` groups of
    C/groups consecutive channels; each (sample, group) is normalised over its channels and
    positions, ``(x - mean) / sqrt(var + eps)`` (biased variance), then times gamma[c] plus
    beta[c] per channel c. Inputs x, gamma [C], [beta [C]]. ``groups = C`` is instance norm
    (torch's instance_norm with input statistics), ``groups = 1`` normalises each sample whole.
    A group holding NaN or +-inf comes out all NaN, as in torch."""

    groups: int
    eps: float = 1e-5
    arity = (2, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x = ins[0]
        channels = _channel_params(x, ins[1:], "group_norm")
        need(self.groups >= 1 and channels % self.groups == 0,
             f"group_norm: groups={self.groups} must divide C={channels}")
        return x


@dataclass(frozen=True)
class BatchNorm(Op):
    """Batch normalisation with given statistics (inference), like
    torch.nn.functional.batch_norm(training=False): ``(x - mean[c]) / sqrt(var[c] + eps) * gamma[c]
    + beta[c]`` for channel c (axis 1) of x [N, C, *spatial] (rank >= 2). Inputs x, mean, var, gamma,
    beta, each [C]. A negative var + eps gives NaN. The front doors fold it into the convolution
    before it when the statistics are weights, so this op remains only for run-time statistics or a
    batch norm with no convolution before it."""

    eps: float = 1e-5
    arity = (5, 5)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _channel_params(ins[0], ins[1:], "batch_norm")
        return ins[0]

"""Reference semantics of the norm family: LayerNorm, RMSNorm, their residual-fused forms,
ResidualNormTee (written from the unfused references, so its blocked layout is the only new thing
to check), Softmax, GroupNorm and BatchNorm."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference
from rlxpy.ir.shape import normalize_axis


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def layer_norm(x: np.ndarray, gamma, beta, eps: float) -> np.ndarray:
    x64 = _f64(x)
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + eps) * _f64(gamma)
    return (y + _f64(beta) if beta is not None else y).astype(x.dtype)


def rms_norm(x: np.ndarray, gamma, beta, eps: float) -> np.ndarray:
    x64 = _f64(x)
    y = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * _f64(gamma)
    return (y + _f64(beta) if beta is not None else y).astype(x.dtype)


@reference(ops.LayerNorm)
def ref_layer_norm(op: ops.LayerNorm, args, node):
    return layer_norm(args[0], args[1], args[2] if len(args) > 2 else None, op.eps)


@reference(ops.RmsNorm)
def ref_rms_norm(op: ops.RmsNorm, args, node):
    return rms_norm(args[0], args[1], args[2] if len(args) > 2 else None, op.eps)


def _residual_sum(has_bias: bool, args) -> np.ndarray:
    total = _f64(args[0]) + _f64(args[1])
    return (total + _f64(args[2]) if has_bias else total).astype(args[0].dtype)


@reference(ops.FusedResidualLN)
def ref_residual_ln(op: ops.FusedResidualLN, args, node):
    return layer_norm(_residual_sum(op.has_bias, args), args[-2], args[-1], op.eps)


@reference(ops.FusedResidualRmsNorm)
def ref_residual_rms(op: ops.FusedResidualRmsNorm, args, node):
    return rms_norm(_residual_sum(op.has_bias, args), args[-2], args[-1], op.eps)


@reference(ops.ResidualNormTee)
def ref_residual_norm_tee(op: ops.ResidualNormTee, args, node):
    x, residual, gamma = args[:3]
    beta = args[3] if len(args) > 3 else None
    total = (x.astype(np.float64) + residual.astype(np.float64)).astype(x.dtype)
    normed = (rms_norm if op.rms else layer_norm)(total, gamma, beta, op.eps)
    return np.stack([total, normed])


@reference(ops.Softmax)
def ref_softmax(op: ops.Softmax, args, node):
    x = args[0].astype(np.float64)
    axis = normalize_axis(op.axis, x.ndim)
    with np.errstate(all="ignore"):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        e = np.exp(shifted)
        return (e / np.sum(e, axis=axis, keepdims=True)).astype(args[0].dtype)


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    """A [C] vector shaped to broadcast over x [N, C, *spatial] of ``rank`` dims, in f64."""
    return _f64(v).reshape((1, -1) + (1,) * (rank - 2))


def _f32_eps(eps: float) -> float:
    """eps as an f32 uniform holds it, so var + eps = 0 exactly when var = -eps in f32."""
    return float(np.float32(eps))


@reference(ops.GroupNorm)
def ref_group_norm(op: ops.GroupNorm, args, node):
    x = args[0]
    grouped = _f64(x).reshape(x.shape[0], op.groups, -1)
    with np.errstate(all="ignore"):
        mean = grouped.mean(-1, keepdims=True)
        var = ((grouped - mean) ** 2).mean(-1, keepdims=True)
        normed = ((grouped - mean) / np.sqrt(var + _f32_eps(op.eps))).reshape(x.shape)
        y = normed * _per_channel(args[1], x.ndim)
        if len(args) > 2:
            y = y + _per_channel(args[2], x.ndim)
    return y.astype(x.dtype)


@reference(ops.BatchNorm)
def ref_batch_norm(op: ops.BatchNorm, args, node):
    x, mean, var, gamma, beta = args
    rank = x.ndim
    with np.errstate(all="ignore"):
        y = (_f64(x) - _per_channel(mean, rank)) / np.sqrt(_per_channel(var, rank) + _f32_eps(op.eps))
        y = y * _per_channel(gamma, rank) + _per_channel(beta, rank)
    return y.astype(x.dtype)

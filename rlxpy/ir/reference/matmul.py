"""Reference semantics of the matmul family; SplitMatMul is written from MatMul's reference, and the
composites (DotGeneral, LoraMatMul, FusedSwiGLU) are computed DIRECTLY (einsum, whole-block numpy),
never by unfusing: the unfuse pass is checked against them."""

from __future__ import annotations

import string

import numpy as np
from scipy import special

from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference
from rlxpy.ir.reference.elementwise import apply_activation, cast_values


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@reference(ops.MatMul)
def ref_matmul(op, args, node):
    a, b = args
    x = np.swapaxes(a, -1, -2) if op.transpose_a else a
    y = np.swapaxes(b, -1, -2) if op.transpose_b else b
    return np.matmul(_f64(x), _f64(y)).astype(a.dtype)


@reference(ops.FusedMatMulBiasAct)
def ref_fused_matmul(op: ops.FusedMatMulBiasAct, args, node):
    x, w, bias = args
    y = (np.matmul(_f64(x), _f64(w)) + _f64(bias)).astype(x.dtype)
    return apply_activation(op.activation, y) if op.activation is not None else y


@reference(ops.GroupedMatMul)
def ref_grouped_matmul(op, args, node):
    x, w, idx = args
    out = np.zeros(node.shape, dtype=np.float64)
    experts = np.trunc(idx.astype(np.float64)).astype(np.int64)
    for row, e in enumerate(experts):
        if 0 <= e < w.shape[0]:
            out[row] = _f64(x[row]) @ _f64(w[e])
    return out.astype(x.dtype)


@reference(ops.SplitMatMul)
def ref_split_matmul(op: ops.SplitMatMul, args, node):
    x, w = args[:2]
    k, n = w.shape
    y = np.matmul(x.reshape(-1, k).astype(np.float64), w.astype(np.float64))
    if op.has_bias:
        y = y + args[2].astype(np.float64)
    y = y.astype(x.dtype)
    if op.activation is not None:
        y = apply_activation(op.activation, y)
    bounds = np.cumsum((0, *op.widths))
    return np.concatenate([y[:, lo:hi].reshape(-1) for lo, hi in zip(bounds[:-1], bounds[1:])])


# -- linear algebra -----------------------------------------------------------------------------
def einsum_spec(op: ops.DotGeneral, lhs_rank: int, rhs_rank: int) -> str:
    """The numpy.einsum subscripts of a DotGeneral, e.g. batch b, contracting k: 'bmk,bkn->bmn'."""
    letters = iter(string.ascii_letters)
    lhs = [""] * lhs_rank
    rhs = [""] * rhs_rank
    for a, b in zip(op.lhs_batch + op.lhs_contracting, op.rhs_batch + op.rhs_contracting):
        lhs[a] = rhs[b] = next(letters)
    lhs_free, rhs_free = op.free_dims(lhs_rank, rhs_rank)
    for d in lhs_free:
        lhs[d] = next(letters)
    for d in rhs_free:
        rhs[d] = next(letters)
    out = [lhs[d] for d in op.lhs_batch] + [lhs[d] for d in lhs_free] + [rhs[d] for d in rhs_free]
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


@reference(ops.DotGeneral)
def ref_dot_general(op: ops.DotGeneral, args, node):
    lhs, rhs = args
    return np.einsum(einsum_spec(op, lhs.ndim, rhs.ndim), _f64(lhs), _f64(rhs)).astype(lhs.dtype)


@reference(ops.LoraMatMul)
def ref_lora_matmul(op: ops.LoraMatMul, args, node):
    x, w, a, b = (_f64(t) for t in args)
    return (x @ w + op.scale * ((x @ a) @ b)).astype(args[0].dtype)


@reference(ops.FusedSwiGLU)
def ref_swiglu(op: ops.FusedSwiGLU, args, node):
    (x,) = args
    half = x.shape[-1] // 2
    first, second = _f64(x[..., :half]), _f64(x[..., half:])
    gate, up = (first, second) if op.gate_first else (second, first)
    with np.errstate(all="ignore"):  # inf * 0 -> NaN, as torch
        y = (up * gate * special.expit(gate)).astype(x.dtype)  # silu(g) = g * sigmoid(g)
    return cast_values(y, op.cast_to) if op.cast_to is not None else y

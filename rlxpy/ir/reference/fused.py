"""Reference semantics of the pattern-pass ops (ir/ops/fused.py), written from the unfused ops'
references so that the blocked layouts are the only new thing to check."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.ops.core import TensorType
from rlxpy.ir.reference import reference
from rlxpy.ir.reference.core import apply_activation
from rlxpy.ir.reference.nn import layer_norm, ref_attention, rms_norm


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


@reference(ops.ResidualNormTee)
def ref_residual_norm_tee(op: ops.ResidualNormTee, args, node):
    x, residual, gamma = args[:3]
    beta = args[3] if len(args) > 3 else None
    total = (x.astype(np.float64) + residual.astype(np.float64)).astype(x.dtype)
    normed = (rms_norm if op.rms else layer_norm)(total, gamma, beta, op.eps)
    return np.stack([total, normed])


@reference(ops.PackedAttention)
def ref_packed_attention(op: ops.PackedAttention, args, node):
    rows = args[0].reshape(op.batch, op.seq, op.row)
    q_width, kv_width = op.num_heads * op.head_dim, op.kv_heads * op.head_dim
    q = rows[..., op.q_col: op.q_col + q_width]
    k = rows[..., op.k_col: op.k_col + kv_width]
    v = rows[..., op.v_col: op.v_col + kv_width]
    unfused = SimpleNamespace(type=TensorType(q.shape, node.dtype), dtype=node.dtype)  # [B, S, H*D]
    return ref_attention(op.unpacked(), [q, k, v, *args[1:]], unfused)

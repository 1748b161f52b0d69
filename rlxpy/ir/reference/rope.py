"""Reference semantics of the rope family: rotary embedding, and RoPE fused with the KV-cache append."""

from __future__ import annotations

import numpy as np

from rlxpy.errors import InputError, where
from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


@reference(ops.Rope)
def ref_rope(op: ops.Rope, args, node):
    x, cos, sin = args[:3]
    if len(args) > 3 and args[3].shape[0] > 1:  # one offset per [S, L] block: each block alone
        blocks = x.reshape((-1,) + x.shape[-2:])
        return np.stack([ref_rope(op, [block, cos, sin, args[3][i: i + 1]], node)
                         for i, block in enumerate(blocks)]).reshape(x.shape)
    offset = op.position_offset + (int(args[3][0]) if len(args) > 3 else 0)
    seq = x.shape[-2]
    if offset < 0 or offset + seq > cos.shape[0]:  # the position input is only known now
        raise InputError(f"{where(node)}: positions {offset}..{offset + seq - 1} exceed the "
                         f"{cos.shape[0]}-row cos/sin tables")
    heads = x.shape[-1] // op.head_dim
    half = op.rot // 2
    c = _f64(cos[offset: offset + seq])[:, None, :]  # [S, 1, half]
    s = _f64(sin[offset: offset + seq])[:, None, :]
    xh = _f64(x).reshape(x.shape[:-1] + (heads, op.head_dim))
    out = xh.copy()
    if op.interleaved:
        even, odd = xh[..., 0:op.rot:2], xh[..., 1:op.rot:2]
        out[..., 0:op.rot:2] = even * c - odd * s
        out[..., 1:op.rot:2] = odd * c + even * s
    else:
        first, second = xh[..., :half], xh[..., half:op.rot]
        out[..., :half] = first * c - second * s
        out[..., half:op.rot] = second * c + first * s
    return out.reshape(x.shape).astype(x.dtype)


@reference(ops.RopeKvAppend)
def ref_rope_kv_append(op: ops.RopeKvAppend, args, node):
    """Rope + CacheWrite composed from their own references; the caches are updated in place in
    the interpreter's values (the op's documented side effect)."""

    qkv, k_cache, v_cache, cos, sin, pos = args
    rope = ops.Rope(op.head_dim, op.n_rot, op.interleaved)
    q = qkv[:, : op.q_width]
    k = qkv[:, op.q_width: op.q_width + op.kv_width]
    v = qkv[:, op.q_width + op.kv_width:]
    rows = qkv.shape[0]
    if rows > 1 and pos.shape == (rows,):  # batched decode: row s at pos[s], in slot s of the caches
        slot = k_cache.shape[0] // rows
        q_out = np.empty_like(q)
        for s in range(rows):
            at = pos[s: s + 1]
            q_out[s: s + 1] = ref_rope(rope, [q[s: s + 1], cos, sin, at], node)
            if int(at[0]) < slot:
                k_cache[s * slot + int(at[0])] = ref_rope(rope, [k[s: s + 1], cos, sin, at], node)[0]
                v_cache[s * slot + int(at[0])] = v[s]
        return q_out
    q_rot = ref_rope(rope, [q, cos, sin, pos], node)
    k_rot = ref_rope(rope, [k, cos, sin, pos], node)
    start = int(pos[0])
    fit = max(0, min(qkv.shape[0], k_cache.shape[0] - start))
    k_cache[start: start + fit] = k_rot[:fit]
    v_cache[start: start + fit] = v[:fit]
    return q_rot

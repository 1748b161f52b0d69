"""Reference semantics: in-place cache writes."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.reference import reference


@reference(ops.CacheWrite)
def ref_cache_write(op, args, node):
    cache, rows, pos = args
    out = np.array(cache, copy=True)
    start = int(pos[0])
    fit = max(0, min(rows.shape[0], cache.shape[0] - start))
    out[start: start + fit] = rows[:fit]
    return out


@reference(ops.RopeKvAppend)
def ref_rope_kv_append(op: ops.RopeKvAppend, args, node):
    """Rope + CacheWrite composed from their own references; the caches are updated in place in
    the interpreter's values (the op's documented side effect)."""
    from rlxpy.ir.reference.nn import ref_rope

    qkv, k_cache, v_cache, cos, sin, pos = args
    rope = ops.Rope(op.head_dim, op.n_rot, op.interleaved)
    q = qkv[:, : op.q_width]
    k = qkv[:, op.q_width: op.q_width + op.kv_width]
    v = qkv[:, op.q_width + op.kv_width:]
    q_rot = ref_rope(rope, [q, cos, sin, pos], node)
    k_rot = ref_rope(rope, [k, cos, sin, pos], node)
    start = int(pos[0])
    fit = max(0, min(qkv.shape[0], k_cache.shape[0] - start))
    k_cache[start: start + fit] = k_rot[:fit]
    v_cache[start: start + fit] = v[:fit]
    return q_rot

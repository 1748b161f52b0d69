"""Reference semantics of the kv family: CacheWrite."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference


@reference(ops.CacheWrite)
def ref_cache_write(op, args, node):
    cache, rows, pos = args
    out = np.array(cache, copy=True)
    if rows.shape[0] > 1 and pos.shape == (rows.shape[0],):  # row s into slot s at pos[s]
        slot = cache.shape[0] // rows.shape[0]
        for s, at in enumerate(int(v) for v in pos):
            if 0 <= at < slot:
                out[s * slot + at] = rows[s]
        return out
    start = int(pos[0])
    fit = max(0, min(rows.shape[0], cache.shape[0] - start))
    out[start: start + fit] = rows[:fit]
    return out

"""KV-cache family: CacheWrite appends rows in place at a run-time position (or, with one position
per row, each row into its own slot of the cache: batched decode)."""

from __future__ import annotations

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

KV_WRITE = kernel(
    "kv_write", params("KvWriteParams", (), n=U32, width=U32, capacity=U32, cache=U32, rows=U32, pos=U32,
                  slot=U32),
    dtypes=accepts(),  # rows are copied word by word, whatever their dtype (checked below: whole words)
)


@lowers(ops.CacheWrite)
def lower_cache_write(node: Node, ctx: LowerCtx) -> list[Step]:
    cache, rows, pos = ctx.inputs(node)
    row_bytes = rows.numel // max(rows.shape[0], 1) * rows.dtype.itemsize
    if row_bytes % 4:
        raise UnsupportedOpError(f"{where(node)}: cache rows of {row_bytes} bytes are not whole words")
    width = row_bytes // 4
    words = rows.shape[0] * width
    # the node's leading dim is the cache capacity, not the rows written: never extent-scaled
    return [
        ctx.dispatch(
            KV_WRITE,
            node,
            ctx.grid_1d(words),
            scalable=False,
            n=words,
            width=width,
            capacity=cache.shape[0],
            cache=ctx.offset(node),
            rows=ctx.offset(rows),
            pos=ctx.offset(pos),
            slot=cache.shape[0] // rows.shape[0] if rows.shape[0] > 1 and pos.shape == rows.shape[:1] else 0,
        )
    ]

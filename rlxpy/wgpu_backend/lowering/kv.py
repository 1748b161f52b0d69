"""KV-cache family: CacheWrite appends rows in place at a run-time position."""

from __future__ import annotations

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

KV_WRITE = kernel(
    "kv_write", params("KvWriteParams", (), n=U32, width=U32, capacity=U32, cache=U32, rows=U32, pos=U32)
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
        )
    ]


ROPE_KV_APPEND = kernel(
    "rope_kv_append",
    params(
        "RopeKvAppendParams",
        (),
        n=U32,
        rows=U32,
        q_width=U32,
        kv_width=U32,
        head_dim=U32,
        n_rot=U32,
        interleaved=U32,
        capacity=U32,
        max_pos=U32,
        qkv=U32,
        k_cache=U32,
        v_cache=U32,
        cos=U32,
        sin=U32,
        pos=U32,
        q_out=U32,
    ),
)


@lowers(ops.RopeKvAppend)
def lower_rope_kv_append(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.RopeKvAppend = node.op  # type: ignore[assignment]
    qkv, k_cache, v_cache, cos, sin, pos = ctx.inputs(node)
    for t in (qkv, k_cache, v_cache, cos, sin):
        if t.dtype.itemsize != 4 or not t.dtype.is_float:
            raise UnsupportedOpError(f"{where(node)}: f32 tensors only, got {t.type}")
    rows = qkv.shape[0]
    n = rows * (op.q_width + 2 * op.kv_width)
    # writes the caches too: never extent-scaled (the node's leading dim is S, but the cache rows
    # it appends must all land for later positions to see them)
    return [
        ctx.dispatch(
            ROPE_KV_APPEND,
            node,
            ctx.grid_1d(n),
            scalable=False,
            n=n,
            rows=rows,
            q_width=op.q_width,
            kv_width=op.kv_width,
            head_dim=op.head_dim,
            n_rot=op.rot,
            interleaved=int(op.interleaved),
            capacity=k_cache.shape[0],
            max_pos=cos.shape[0],
            qkv=ctx.offset(qkv),
            k_cache=ctx.offset(k_cache),
            v_cache=ctx.offset(v_cache),
            cos=ctx.offset(cos),
            sin=ctx.offset(sin),
            pos=ctx.offset(pos),
            q_out=ctx.offset(node),
        )
    ]

"""Rope family: Rope is one rope_rotate dispatch; RopeKvAppend (rotate q and k, append k and v to
the KV caches) one rope_kv_append dispatch.

Rope:

x is [..., S, L] with L = heads * head_dim and the sequence on the second-to-last axis; the
cos/sin tables are [max_pos, n_rot/2]. The position of row s is s + position_offset, plus the
value of the optional i32[1] position input, read by the kernel at run time (KV-cache decode).
Matches transformers' ``apply_rotary_pos_emb`` (half-split) and llama.cpp's interleaved rope.
"""

from __future__ import annotations

from rlxpy.errors import GraphError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import I32, U32, kernel, params
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

ROPE_ROTATE = kernel("rope_rotate", params(
    "RopeRotateParams", n=U32, seq=U32, width=U32, head_dim=U32, n_rot=U32, x=U32, cos=U32, sin=U32, y=U32,
    max_pos=U32, offset=I32, pos_input=U32, has_pos=U32),
    dtypes=accepts(DType.F32, DType.F32, DType.F32, out=DType.F32))  # x, cos, sin (the position: below)


@lowers(ops.Rope)
def lower_rope(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.Rope = node.op  # type: ignore[assignment]
    x, cos, sin = ctx.inputs(node)[:3]
    position = ctx.inputs(node)[3] if len(node.inputs) > 3 else None
    if position is not None and position.dtype not in (DType.I32, DType.U32):
        raise GraphError(f"{where(node)}: position input must be i32[1], got {position.type}")
    seq, width = x.shape[-2], x.shape[-1]
    max_pos = cos.shape[0]
    if op.position_offset < 0 or op.position_offset + seq > max_pos:
        raise GraphError(f"{where(node)}: positions {op.position_offset}..{op.position_offset + seq - 1} "
                         f"exceed the cos/sin tables {cos.type} (max_pos {max_pos})")
    if node.numel == 0:
        return []
    return [ctx.dispatch(ROPE_ROTATE, node, ctx.grid_1d(node.numel),
                         {"INTERLEAVED": "true" if op.interleaved else "false"},
                         n=node.numel, seq=seq, width=width, head_dim=op.head_dim, n_rot=op.rot,
                         x=ctx.offset(x), cos=ctx.offset(cos), sin=ctx.offset(sin), y=ctx.offset(node),
                         max_pos=max_pos, offset=op.position_offset,
                         pos_input=ctx.offset(position) if position is not None else 0,
                         # 2: one position per [S, L] block (batched decode)
                         has_pos=0 if position is None else 2 if position.numel > 1 else 1)]


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
        slot=U32,
    ),
    # qkv, k_cache, v_cache, cos, sin f32, pos i32; the caches are appended to in place
    dtypes=accepts(*[DType.F32] * 5, out=DType.F32),
    mutates=("k_cache", "v_cache"),
)


@lowers(ops.RopeKvAppend)
def lower_rope_kv_append(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.RopeKvAppend = node.op  # type: ignore[assignment]
    qkv, k_cache, v_cache, cos, sin, pos = ctx.inputs(node)
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
            # per-row positions (batched decode): each row owns an equal slot of the caches
            slot=k_cache.shape[0] // rows if rows > 1 and pos.shape == (rows,) else 0,
        )
    ]

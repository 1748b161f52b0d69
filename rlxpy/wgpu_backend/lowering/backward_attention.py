"""AttentionBackward on f32: flash-attention-2 style kernels that recompute the probabilities tile by
tile and never materialise the S_q x S_k matrices.

Every node first runs backward_attention_stats (per query row: the max score m, the normaliser l and
sum_j exp(s - m) dP_ij, from which D = dO . O), into declared scratch; then

* wrt query: backward_attention_dq, one workgroup per (64 queries, head, batch) walking tiles of 32 keys;
* wrt key / value: backward_attention_dkv, one workgroup per (64 keys, kv head, batch) walking tiles of 32
  queries of every query head in its GQA group (the group's gradients are summed in the workgroup);
* wrt all: the statistics once, then both, the dkv pass computing dK and dV together; the output is
  [dq, dk, dv] flat, each in its input's layout;
* wrt packed: the same passes, dq, dk and dv stored side by side in each token's row (the output
  strides oq_* / ok_* differ from the inputs' strides only there).

With ``given_output`` the statistics pass takes D = dO . O from the forward's output instead of summing
exp(s - m) dO . V over the keys, so it computes one product (Q K^T) per tile instead of two.

The five products (Q K^T, dO V^T, then dS K, or P^T dO and dS^T Q) are register-tiled like the
GEMMs: a thread owns a 4 x 2 block of scores and 4 rows x 4 head dims (per 64) of a gradient, reads
them as vec4s from double-buffered workgroup memory (one barrier per step of 8 U head dims or KS
rows, the next step loaded while this one is summed; ``staging`` sizes the step by the device's
workgroup memory), and its sums are written out by the lowerer (``score_sums``, ``row_sums``,
``store_grads``) so that the accumulators index registers, never memory. The statistics keep
per-thread running values, merged once per row at the end. Causal and sliding-window masks skip the
tiles they zero out. q, k, v, dy and the output are read in place in any layout of
``attention_layout`` through (batch, head, seq) strides; the mask as Attention's. Work longer than
the loop budget runs over several dispatches (the stats resume from what they stored, the gradients
add to what was written).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rlxpy.errors import GraphError, LimitError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.attention import attention_layout
from rlxpy.ir.ops.backward import AttentionWrt
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.kernels.wgsl import word_type
from rlxpy.wgpu_backend.lowering.reduce import chunks, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

ROWS = 64  # rows (queries, or keys for dK/dV) per workgroup
COLS = 32  # columns (keys, or queries) per tile
MAX_HEAD_DIM = 256
_FIELDS = dict(
    s_q=U32, s_k=U32, group=U32, heads=U32, q=U32, k=U32, v=U32, dy=U32, out=U32, out2=U32, stats=U32,
    q_sb=U32, q_sh=U32, q_ss=U32, k_sb=U32, k_sh=U32, k_ss=U32, o=U32,
    oq_sb=U32, oq_sh=U32, oq_ss=U32, ok_sb=U32, ok_sh=U32, ok_ss=U32,
    mask=U32, m_sb=U32, m_sh=U32, m_sq=U32, m_sk=U32, scale=F32, softcap=F32, window=U32, start=U32,
    count=U32,
)
LAYOUT = params("BackwardAttentionParams", **_FIELDS)
#: q, k, v, dy f32; a mask any word type
DTYPES = accepts(DType.F32, DType.F32, DType.F32, DType.F32, out=DType.F32)


def tile_bytes(values: Mapping[str, object]) -> int:
    """Workgroup memory of include/backward_attention_tiles: sa (2 x 128 U vec4s), sb (2 x 256 U words)
    and sp (512 vec4s)."""
    unit = int(values["U"])  # type: ignore[call-overload]
    return 256 * unit * 16 + 512 * unit * 4 + 512 * 16


#: no runtime checks: the staging buffers' indices stay under 128 U / 256 U per half (staging() keeps a
#: row-product step's KS x DG x 16 vec4s within one), sp's under 512, and every global read goes through
#: row_quad's or the mask's clamps; the GPT training step 6.5% faster on an H100 (benches/RESULTS.md)
_KERNEL = dict(dtypes=DTYPES, shared_bytes=tile_bytes, sizes={"U": 1}, checked=False)
BACKWARD_ATTENTION_STATS = kernel("backward_attention_stats", LAYOUT, **_KERNEL)
BACKWARD_ATTENTION_DQ = kernel("backward_attention_dq", LAYOUT, **_KERNEL)
BACKWARD_ATTENTION_DKV = kernel("backward_attention_dkv", LAYOUT, **_KERNEL)

Strides = tuple[int, int, int]


def seq_strides(node: Node, t: Node, heads: int, head_dim: int, what: str) -> tuple[int, int, Strides]:
    """(batch, seq, (batch, head, seq) element strides) of an attention operand in its layout."""
    layout = attention_layout(t.type, heads, head_dim)
    shape = t.shape
    if layout == "bhsd":
        batch, seq = shape[0], shape[2]
        strides = (heads * seq * head_dim, seq * head_dim, head_dim)
    elif layout in ("bshd", "bs(hd)"):
        batch, seq = shape[0], shape[1]
        strides = (seq * heads * head_dim, head_dim, heads * head_dim)
    else:  # "hsd": [B*H, S, D]
        if shape[0] % heads:
            raise GraphError(f"{where(node)}: {what} {t.type} is not [B*H, S, D] with {heads} heads")
        batch, seq = shape[0] // heads, shape[1]
        strides = (heads * seq * head_dim, seq * head_dim, head_dim)
    return batch, seq, strides


def mask_strides(node: Node, mask: Node, sizes: dict[str, int]) -> tuple[int, int, int, int]:
    """(batch, head, query, key) element strides of a [B,S_k], [B,S_q,S_k] or [B,H,S_q,S_k] mask, a
    size-1 dim broadcasting (stride 0)."""
    names = {2: "bk", 3: "bqk", 4: "bhqk"}.get(mask.rank)
    if names is None:
        raise GraphError(f"{where(node)}: mask {mask.type} must be [B, S_k], [B, S_q, S_k] or "
                         "[B, H, S_q, S_k]")
    strides = dict.fromkeys("bhqk", 0)
    step = 1
    for name, size in reversed(list(zip(names, mask.shape))):
        if size not in (1, sizes[name]):
            raise GraphError(f"{where(node)}: mask {mask.type} does not broadcast to the scores")
        strides[name] = step if size != 1 else 0
        step *= size
    return strides["b"], strides["h"], strides["q"], strides["k"]


def _sizes(node: Node, graph: Graph) -> tuple[int, int, int]:
    op: ops.AttentionBackward = node.op  # type: ignore[assignment]
    q, k = (graph.nodes[i] for i in node.inputs[:2])
    batch, s_q, _ = seq_strides(node, q, op.num_heads, op.head_dim, "q")
    _, s_k, _ = seq_strides(node, k, op.forward().kv_heads, op.head_dim, "k")
    return batch, s_q, s_k


def output_strides(op: ops.AttentionBackward, q: Node, k: Node, q_strides: Strides, k_strides: Strides
                   ) -> tuple[Strides, Strides]:
    """(batch, head, seq) strides of dq and of dk / dv in the output: their inputs' layouts, or with
    wrt PACKED the rows of (H + 2 H_kv) D per token."""
    if op.wrt is not AttentionWrt.PACKED:
        return q_strides, k_strides
    row = (op.num_heads + 2 * op.forward().kv_heads) * op.head_dim
    packed = (q.shape[1] * row, op.head_dim, row)
    return packed, packed


def stats_bytes(node: Node, graph: Graph) -> int:
    """Scratch for the row statistics: 3 floats per (batch, head, query)."""
    batch, s_q, _ = _sizes(node, graph)
    return 12 * batch * node.op.num_heads * s_q


def staging(head_dim: int, storage: int) -> tuple[int, int]:
    """(U, KS): the staging unit (8 U head dims per score step) and rows per row-product step. The
    larger U the fewer steps (each a barrier and a memory round trip that 384 workgroups of a small
    training shape cannot hide by occupancy); U is capped by the device's workgroup memory and by the
    head dim. KS: the largest power of two whose rows (KS x DG x 64 dims) fit one buffer of 128 U vec4s."""
    unit = next(u for u in (4, 2, 1) if u == 1 or (tile_bytes({"U": u}) <= storage and 8 * u <= head_dim + 7))
    rows = 32
    while rows * math.ceil(head_dim / 64) > 8 * unit:
        rows //= 2
    return unit, rows


def _tile_steps(head_dim: int, unit: int, rows: int) -> int:
    """Loop iterations one tile costs a thread: two score products (a step and 3 x 4 staging stores per
    8 U head dims), two row products (BC / KS steps) and the element loops."""
    return 2 * 13 * (math.ceil(head_dim / (8 * unit)) + 1) + 2 * (COLS // rows + 1) + 16


def score_sums(unit: int) -> str:
    """One step of score_block written out: per head dim, a vec4 of 4 rows times 2 column words."""
    return "\n".join(f"        {{ let a = sa[ta + {kk * ROWS // 4}u]; s0 += a * sb[tb + {kk * COLS}u]; "
                     f"s1 += a * sb[tb + {kk * COLS + 1}u]; }}" for kk in range(8 * unit))


def row_sums(groups: int, rows: int) -> str:
    """One step of row_product written out: per staged row, a vec4 of 4 weights (rows) times DG vec4s of
    head dims into acc[DG a + g]."""
    lines = []
    for kk in range(rows):
        reads = [f"let w = sp[tw + {kk * ROWS // 4}u];"]
        reads += [f"let r{g} = sa[tr + {kk * 16 * groups + 16 * g}u];" for g in range(groups)]
        sums = [f"(*acc)[{groups * a + g}] += w.{lane} * r{g};" for a, lane in enumerate("xyzw")
                for g in range(groups)]
        lines.append("        { " + " ".join(reads + sums) + " }")
    return "\n".join(lines)


def store_grads(groups: int) -> str:
    """store_grads' body written out: grad_out for each accumulator (row a, head dims 64 g ..)."""
    return "\n".join(f"    grad_out(out, stride, row0 + {a}u, rows_end, d0 + {64 * g}u, scale, "
                     f"(*acc)[{groups * a + g}]);" for a in range(4) for g in range(groups))


def tile_subs(head_dim: int, mask_kind: int, load_mask: str, storage: int) -> dict[str, object]:
    """The placeholders of include/backward_attention_tiles.wgsl for a head dim and a device's
    workgroup memory."""
    groups = math.ceil(head_dim / 64)
    unit, rows = staging(head_dim, storage)
    return {"D": head_dim, "DG": groups, "U": unit, "KS": rows, "SA_VECS": 256 * unit, "SB_WORDS": 512 * unit,
            "MASK_KIND": mask_kind, "LOAD_MASK": load_mask, "SCORE_SUMS": score_sums(unit),
            "ROW_SUMS": row_sums(groups, rows), "STORE_GRADS": store_grads(groups)}


@lowers(ops.AttentionBackward, scratch=stats_bytes)
def lower_attention_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.AttentionBackward = node.op  # type: ignore[assignment]
    q, k, v, dy, *extra = ctx.inputs(node)
    o = extra.pop(0) if op.given_output else None
    mask = extra[0] if extra else None
    heads, kv_heads, head_dim = op.num_heads, op.forward().kv_heads, op.head_dim
    if head_dim > MAX_HEAD_DIM:
        raise LimitError(f"{where(node)}: head_dim {head_dim} exceeds the {MAX_HEAD_DIM} the attention "
                         "backward kernels support")
    batch, s_q, q_strides = seq_strides(node, q, heads, head_dim, "q")
    batch_k, s_k, k_strides = seq_strides(node, k, kv_heads, head_dim, "k")
    if batch_k != batch or v.shape != k.shape or dy.shape != q.shape:
        raise GraphError(f"{where(node)}: q {q.type}, k {k.type}, v {v.type} and dy {dy.type} disagree")
    if node.numel == 0 or min(batch, s_q, s_k) == 0:
        return []
    base, size = ctx.scratch
    need = stats_bytes(node, ctx.graph)
    if size < need or base < ctx.window_base or base + need > ctx.window_base + ctx.window_size:
        return host_steps(node, ctx)  # the statistics need scratch inside this node's binding
    m_sb = m_sh = m_sq = m_sk = 0
    load_mask = "ld_f32"
    if mask is not None:
        m_sb, m_sh, m_sq, m_sk = mask_strides(node, mask, {"b": batch, "h": heads, "q": s_q, "k": s_k})
        load_mask = word_type(mask.dtype, f"{where(node)} mask")[1]
    out = ctx.offset(node)
    out_q, out_k = output_strides(op, q, k, q_strides, k_strides)
    fields = dict(
        s_q=s_q, s_k=s_k, group=heads // kv_heads, heads=heads, q=ctx.offset(q), k=ctx.offset(k),
        v=ctx.offset(v), dy=ctx.offset(dy), out=out, out2=0, stats=(base - ctx.window_base) // 4,
        q_sb=q_strides[0], q_sh=q_strides[1], q_ss=q_strides[2],
        k_sb=k_strides[0], k_sh=k_strides[1], k_ss=k_strides[2], o=ctx.offset(o) if o is not None else 0,
        oq_sb=out_q[0], oq_sh=out_q[1], oq_ss=out_q[2], ok_sb=out_k[0], ok_sh=out_k[1], ok_ss=out_k[2],
        mask=ctx.offset(mask) if mask is not None else 0, m_sb=m_sb, m_sh=m_sh, m_sq=m_sq, m_sk=m_sk,
        scale=op.score_scale if op.score_scale is not None else 1.0 / math.sqrt(head_dim),
        softcap=op.softcap or 0.0, window=op.window,
    )
    subs = tile_subs(head_dim, int(op.mask_kind), load_mask, ctx.facts.max_workgroup_storage)
    stats_subs = {**subs, "GIVEN_O": str(o is not None).lower()}
    key_tiles, query_tiles = math.ceil(s_k / COLS), math.ceil(s_q / COLS)
    per_dispatch = steps_per_dispatch(node, _tile_steps(head_dim, int(subs["U"]), int(subs["KS"])), 128,
                                       "AttentionBackward")
    query_grid = (math.ceil(s_q / ROWS), heads, batch)
    steps = [ctx.dispatch(BACKWARD_ATTENTION_STATS, node, query_grid, stats_subs, scalable=False, start=start,
                          count=count, **fields)
             for start, count in chunks(key_tiles, per_dispatch)]
    both = op.wrt in (AttentionWrt.ALL, AttentionWrt.PACKED)
    if op.wrt is AttentionWrt.QUERY or both:
        steps += [ctx.dispatch(BACKWARD_ATTENTION_DQ, node, query_grid, subs, scalable=False, start=start,
                               count=count, **fields)
                  for start, count in chunks(key_tiles, per_dispatch)]
    if op.wrt is AttentionWrt.QUERY:
        return steps
    group_steps = per_dispatch // (heads // kv_heads)
    if group_steps < 1:
        raise LimitError(f"{where(node)}: {heads // kv_heads} query heads per kv head exceed the loop budget")
    if op.wrt is AttentionWrt.ALL:  # dK after dq, dV after dK, in the flat output
        fields |= {"out": out + q.numel, "out2": out + q.numel + k.numel}
    elif op.wrt is AttentionWrt.PACKED:  # dK after dq, dV after dK, in each token's row
        fields |= {"out": out + heads * head_dim, "out2": out + (heads + kv_heads) * head_dim}
    kv_subs = {**subs, "WRT": int(AttentionWrt.ALL) if both else int(op.wrt)}
    steps += [ctx.dispatch(BACKWARD_ATTENTION_DKV, node, (math.ceil(s_k / ROWS), kv_heads, batch), kv_subs,
                           scalable=False, start=start, count=count, **fields)
              for start, count in chunks(query_tiles, group_steps)]
    return steps

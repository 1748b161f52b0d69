"""Attention family: Attention (attention_flash for prefill, attention_decode + attention_combine for
few queries) and PackedAttention (the same kernels, reading q, k and v in place from one parent).

Every layout of ``attention_layout`` is read in place through (batch, head, seq) strides in the
uniform record; the head dim is contiguous. Both kernels keep an online softmax (running max and
sum per query row, f32) and never materialise the S_q x S_k score matrix:

* S_q > DECODE_MAX_Q: attention_flash, one workgroup per (64 queries, head, batch); Q/K/V tiles go
  through workgroup memory, each thread holds a 4 x 2 block of scores and 4 rows of its output dims.
* S_q <= DECODE_MAX_Q, keys split: attention_decode, one workgroup per (key split, kv head x row chunk,
  batch): the query rows that share a kv head (GQA heads x S_q) read each K/V row together, the keys of
  a tile are spread over the threads, and the key splits are merged by attention_combine (split-K).
* S_q <= DECODE_MAX_Q, no split (KV caches up to UNSPLIT_CACHE_KEYS, short key ranges):
  attention_decode_row (lowering/attention_decode.py), one workgroup per query row.

``kv_len`` (a scaled uniform field, S_k at compile time) is the number of cache entries attended:
keys past it are never read, and CAUSAL / SLIDING_WINDOW put query i at kv_len - S_q + i. With
``dynamic_kv`` the kernels read kv_len = pos + S_q from the pos tensor at run time instead (KV-cache
decoding: one compiled graph serves every position, and work grows with the position); a pos of B
entries gives batch b its own kv_len = pos[b] + S_q (batched decode: one slot of the cache per batch
entry, each at its own length).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlxpy.errors import GraphError, LimitError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.attention import attention_layout
from rlxpy.ir.ops.base import TensorType
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.kernels.wgsl import word_type
from rlxpy.wgpu_backend.lowering.attention_decode import decode_row_step, row_fits_loop_budget
from rlxpy.wgpu_backend.lowering.attention_flash import (
    ATTENTION_DTYPES,
    ATTENTION_FIELDS,
    ATTENTION_FLASH_PARAMS,
    flash_rows_step,
)
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

MAX_HEAD_DIM = 256
DECODE_MAX_Q = 4  # up to this many queries, one workgroup per query row beats a mostly idle flash block
DECODE_WG = 256
DECODE_ROWS = 4  # query rows per attention_decode workgroup (a vec4 of rows per key and dim)
DECODE_BATCH = 32  # most loads one thread issues before using them
SPLIT_MIN_KEYS = 128  # fewest keys per split-K workgroup
SPLIT_TARGET_GROUPS = 256  # split until about this many workgroups are in flight (or keys run out)
SPLIT_MAX = 32
# KV-cache decoding (dynamic_kv) of caches up to this many keys runs unsplit: every dispatch costs
# ~7 µs of host encoding (benches/RESULTS.md), more than a one-workgroup-per-kv-head pass over a
# few thousand keys costs the GPU, and an unsplit pass needs no attention_combine dispatch.
UNSPLIT_CACHE_KEYS = 4096
#: Unsplit decode runs attention_decode_row (lowering/attention_decode.py: a workgroup per query row, no
#: barrier in the key loop); False keeps attention_decode there too (A/B runs).
DECODE_ROW = True
COMBINE_WG = 64

_COMMON = ATTENTION_FIELDS
ATTENTION_FLASH = kernel(
    "attention_flash", ATTENTION_FLASH_PARAMS, dtypes=ATTENTION_DTYPES,
    workgroup=(256, 1, 1), shared_bytes=14976,  # the two workgroup arrays of attention_flash.wgsl
    # no runtime checks: its tile and probability indices stay inside the arrays for every head_dim
    # (KC * D <= 1024, KC <= 32), global reads go through block_value's clamp
    checked=False,
)
FLASH_QUERIES = 64  # queries per attention_flash workgroup
FLASH_KEYS = 32  # keys per attention_flash block (its BK)
ATTENTION_DECODE = kernel(
    "attention_decode",
    params("AttentionDecodeParams", ("kv_len",), **_COMMON, heads=U32, splits=U32, part=U32),
    dtypes=ATTENTION_DTYPES,
    workgroup=(DECODE_WG, 1, 1),
    # the staged queries (QD vec4s: 4 KiB at most), then ps and red (2 x 4 KiB) and red16
    shared_bytes=lambda s: 16 * int(s["QD"]) + 2 * 4096 + 256, sizes={"QD": 256},
)
ATTENTION_ROWS_WG = 8  # one SIMD batch of lavapipe: a decode step's few rows still spread over the cores
ATTENTION_ROWS = kernel("attention_rows", ATTENTION_DECODE.params, dtypes=ATTENTION_DTYPES,
                        workgroup=(ATTENTION_ROWS_WG, 1, 1))
ATTENTION_COMBINE = kernel(
    "attention_combine",
    params(
        "AttentionCombineParams",
        rows=U32,
        heads=U32,
        s_q=U32,
        splits=U32,
        part=U32,
        o=U32,
        o_sb=U32,
        o_sh=U32,
        o_ss=U32,
    ),
    dtypes=ATTENTION_DTYPES,
    workgroup=(COMBINE_WG, 1, 1),
)


def flash_fits_loop_budget(s_k: int, head_dim: int) -> bool:
    """Does attention_flash (one invocation walks every visible key, FLASH_KEYS a block) stay within
    LOOP_BUDGET on lavapipe for S_k keys? A block runs about head_dim + head_dim / 16 steps of its score
    loops, FLASH_KEYS of its value loop and a few fixed ones (counted generously: llvmpipe unrolls some;
    a 128-dim head measured wrong between 8000 and 12000 keys). Longer walks take attention_decode there,
    whose loops run per 256-key block."""
    tiles = flash_tiles(head_dim)
    per_block = head_dim + head_dim // 16 + FLASH_KEYS + FLASH_KEYS // tiles["KC"] + 4 * tiles["UD"] + 32
    return math.ceil(s_k / FLASH_KEYS) * per_block <= LOOP_BUDGET


def rows_fit_loop_budget(s_k: int, head_dim: int) -> bool:
    """Does attention_rows (CPU adapters' decode kernel: one invocation walks every key, two loops of
    head_dim steps a key) stay within LOOP_BUDGET for S_k keys? Longer caches take
    attention_decode there (its loops are per 256-key block; attention_decode_row's whole dot products,
    without subgroups, grow with head_dim x keys)."""
    return s_k * (2 * head_dim + 1) + head_dim <= LOOP_BUDGET


def flash_tiles(head_dim: int) -> dict[str, int]:
    """attention_flash's per-head-dim constants: UD = ceil(D / 16) output dims per thread and row; KC = keys
    per V chunk, the largest power of two <= 32 whose chunk (KC x D, rows padded to D + 1, read up to
    16 * UD columns wide) fits the 1632-float tile area and 4 loads per thread."""
    units = math.ceil(head_dim / 16)
    keys = 32
    while keys > 1 and (keys * head_dim > 1024 or (keys - 1) * (head_dim + 1) + 16 * units > 1632):
        keys //= 2
    return {"UD": units, "KC": keys}


def _seq_strides(
    node: Node, t: Node, layout: str, heads: int, head_dim: int, what: str
) -> tuple[int, int, tuple[int, int, int]]:
    """(batch, seq, (batch stride, head stride, seq stride)) of q/k/v in its layout, checked."""
    shape = t.shape
    ok = shape[-1] == head_dim or (layout == "bs(hd)" and shape[-1] == heads * head_dim)
    if layout == "bhsd":
        batch, seq, strides = shape[0], shape[2], (heads * shape[2] * head_dim, shape[2] * head_dim, head_dim)
        ok = ok and shape[1] == heads
    elif layout in ("bshd", "bs(hd)"):
        batch, seq, strides = shape[0], shape[1], (shape[1] * heads * head_dim, head_dim, heads * head_dim)
        ok = ok and (layout == "bs(hd)" or shape[2] == heads)
    else:  # "hsd": [B*H, S, D]
        batch, seq, strides = (
            shape[0] // heads,
            shape[1],
            (heads * shape[1] * head_dim, shape[1] * head_dim, head_dim),
        )
        ok = ok and shape[0] % heads == 0
    if not ok:
        raise GraphError(
            f"{where(node)}: {what} {t.type} does not fit layout {layout} with {heads} heads "
            f"of dim {head_dim}"
        )
    return batch, seq, strides


def _mask_strides(node: Node, mask: Node, dims: dict[str, int]) -> tuple[int, int, int, int]:
    """(batch, head, query, key) element strides of a [B,S_k], [B,S_q,S_k] or [B,H,S_q,S_k] mask;
    a size-1 dim broadcasts (stride 0)."""
    names = {2: "bk", 3: "bqk", 4: "bhqk"}.get(mask.rank)
    if names is None:
        raise GraphError(
            f"{where(node)}: mask {mask.type} must be [B, S_k], [B, S_q, S_k] or [B, H, S_q, S_k]"
        )
    strides = dict.fromkeys("bhqk", 0)
    step = 1
    for name, size in reversed(list(zip(names, mask.shape))):
        if size not in (1, dims[name]):
            want = ", ".join(str(dims[n]) for n in names)
            form = ", ".join({"b": "B", "h": "H", "q": "S_q", "k": "S_k"}[n] for n in names)
            raise GraphError(f"{where(node)}: mask {mask.type} does not broadcast to [{want}] ([{form}])")
        strides[name] = step if size != 1 else 0
        step *= size
    return strides["b"], strides["h"], strides["q"], strides["k"]


def decode_batches(head_dim: int) -> dict[str, str]:
    """attention_decode's straight-line load batches (WGSL text): a thread issues all the loads of a
    batch before using any, written out rather than looped, so that the shader compiler cannot
    serialise them into one load round trip per element (what made a looped version latency-bound
    on an H100). Scores: dims part + 4n of its key in each of the block's four 64-key parts; p * v:
    four dims of four keys."""
    score = [f"        let k_row{s} = k_base + min(k0 + {64 * s}u + kq, k_end - 1u) * p.k_ss;"
             for s in range(4)]
    loads = [(s, n) for s in range(4) for n in range(math.ceil(head_dim / 4))]  # sub-block s, dims part + 4n
    for first in range(0, len(loads), DECODE_BATCH):
        batch = loads[first: first + DECODE_BATCH]
        score += [f"        let kx{s}_{n} = key_dim(k_row{s}, part + {4 * n}u);" for s, n in batch]
        score += [f"        dot{s} += qs[part + {4 * n}u] * kx{s}_{n};" for s, n in batch]
    pv = []
    for u in range(4):
        pv += [f"                let c{u} = c + {u}u * DG;",
               f"                let p{u} = select(vec4<f32>(0.0), ps[min(c{u}, TK - 1u)], c{u} < n);",
               f"                let vrow{u} = v_base + (k0 + min(c{u}, n - 1u)) * p.k_ss;"]
        pv += [f"                let v{u}_{e} = key_dim(vrow{u}, 4u * dq + {e}u);" for e in range(4)]
    for u in range(4):
        pv += [f"                acc{e} += p{u} * v{u}_{e};" for e in range(4)]
    return {"SCORE_BATCH": "\n".join(score), "PV_BATCH": "\n".join(pv)}


def decode_blocks(heads: int, group: int, s_q: int, head_dim: int) -> tuple[int, int]:
    """(query rows per attention_decode workgroup, row chunks per kv head): the GQA group's heads x S_q
    rows go four at a time (one vec4 of rows per key and dim)."""
    return DECODE_ROWS, math.ceil(group * s_q / DECODE_ROWS)


def wanted_splits(groups: int, s_k: int) -> int:
    """Split-K factor that fills the GPU: about SPLIT_TARGET_GROUPS workgroups (``groups`` per split),
    each with at least SPLIT_MIN_KEYS keys."""
    return max(1, min(math.ceil(SPLIT_TARGET_GROUPS / groups), math.ceil(s_k / SPLIT_MIN_KEYS), SPLIT_MAX))


def scratch_bytes(node: Node, graph: Graph) -> int:
    """Scratch an Attention node's split-K partial records want ([acc[D], m, l] per query row and
    split); 0 when it runs attention_flash. The lowerer uses what ``ctx.scratch`` offers and splits less
    when it is smaller, so a compiler sizing the arena's scratch as the max over nodes makes decode
    use its full split (the default 64 KiB allows ~3 splits for 32 heads of dim 128)."""
    op: ops.Attention = node.op  # type: ignore[assignment]
    if isinstance(op, ops.PackedAttention):
        batch, s_q, s_k = op.batch, op.seq, op.seq
    else:
        q, k = (graph.nodes[i] for i in node.inputs[:2])
        batch, s_q, _ = _seq_strides(
            node, q, attention_layout(q.type, op.num_heads, op.head_dim), op.num_heads, op.head_dim, "q"
        )
        _, s_k, _ = _seq_strides(
            node, k, attention_layout(k.type, op.kv_heads, op.head_dim), op.kv_heads, op.head_dim, "k"
        )
    if s_q > DECODE_MAX_Q or (op.dynamic_kv and s_k <= UNSPLIT_CACHE_KEYS):
        return 0
    group = op.num_heads // op.kv_heads
    _, chunks = decode_blocks(op.num_heads, group, s_q, op.head_dim)
    splits = wanted_splits(batch * op.kv_heads * chunks, s_k)
    return 0 if splits == 1 else 4 * batch * op.num_heads * s_q * splits * (op.head_dim + 2)


def _decode_splits(groups: int, rows: int, s_k: int, head_dim: int, ctx: LowerCtx) -> int:
    """wanted_splits, bounded by the scratch space (``ctx.scratch``) the ``rows`` partial records need."""
    scratch_base, scratch_size = ctx.scratch
    window_end = ctx.window_base + ctx.window_size
    if scratch_base < ctx.window_base or scratch_base + scratch_size > window_end:
        return 1  # the scratch area is outside this step's binding
    fit = scratch_size // (4 * rows * (head_dim + 2))
    return max(1, min(wanted_splits(groups, s_k), fit))


@lowers(ops.Attention, scratch=scratch_bytes)
def lower_attention(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.Attention = node.op  # type: ignore[assignment]
    q, k, v = ctx.inputs(node)[:3]
    extra = ctx.inputs(node)[3:]
    pos = extra.pop() if op.dynamic_kv else None  # KV-cache mode: kv_len = pos + S_q, read at run time
    mask = extra[0] if extra else None
    heads, kv_heads, head_dim = op.num_heads, op.kv_heads, op.head_dim
    _check_head_dim(node, op)
    layout_q = attention_layout(TensorType(q.shape, q.dtype), heads, head_dim)
    layout_k = attention_layout(TensorType(k.shape, k.dtype), kv_heads, head_dim)
    batch, s_q, q_strides = _seq_strides(node, q, layout_q, heads, head_dim, "q")
    batch_k, s_k, k_strides = _seq_strides(node, k, layout_k, kv_heads, head_dim, "k")
    if batch_k != batch or v.shape != k.shape:
        raise GraphError(
            f"{where(node)}: q {q.type} has batch {batch} but k {k.type} / v {v.type} have batch {batch_k}"
        )
    offsets = (ctx.offset(q), ctx.offset(k), ctx.offset(v))
    sizes = (batch, s_q, s_k)
    return attention_steps(node, ctx, op, offsets, sizes, q_strides, k_strides, q_strides, mask, pos)


@lowers(ops.PackedAttention, scratch=scratch_bytes)
def lower_packed_attention(node: Node, ctx: LowerCtx) -> list[Step]:
    """Attention reading q, k, v in place from the packed parent: each is a column run of the parent's
    token rows, so (batch, head, seq) strides are (S * row, D, row) and offsets parent + column."""
    op: ops.PackedAttention = node.op  # type: ignore[assignment]
    parent, *extra = ctx.inputs(node)
    _check_head_dim(node, op)
    base = ctx.offset(parent)
    strides = (op.seq * op.row, op.head_dim, op.row)
    out = (op.seq * op.num_heads * op.head_dim, op.head_dim, op.num_heads * op.head_dim)
    offsets = (base + op.q_col, base + op.k_col, base + op.v_col)
    sizes = (op.batch, op.seq, op.seq)
    return attention_steps(node, ctx, op.unpacked(), offsets, sizes, strides, strides, out,
                           extra[0] if extra else None, None, operands=[parent, parent, parent, *extra])


def _check_head_dim(node: Node, op: ops.Attention) -> None:
    if op.head_dim > MAX_HEAD_DIM:
        raise LimitError(
            f"{where(node)}: head_dim {op.head_dim} exceeds the {MAX_HEAD_DIM} the attention kernels support"
        )


Triple = tuple[int, int, int]


def attention_steps(node: Node, ctx: LowerCtx, op: ops.Attention, offsets: Triple, sizes: Triple,
                    q_strides: Triple, k_strides: Triple, o_strides: Triple, mask: Node | None,
                    pos: Node | None, operands: Sequence[Node] | None = None) -> list[Step]:
    """The attention dispatches for operands at element ``offsets`` (q, k, v) with (batch, head, seq)
    strides (v shares k's), ``sizes`` = (batch, S_q, S_k); the output is written with ``o_strides``.
    ``operands``: the tensors read as q, k, v, mask, when they are not the node's inputs."""
    heads, kv_heads, head_dim = op.num_heads, op.kv_heads, op.head_dim
    batch, s_q, s_k = sizes
    (q_sb, q_sh, q_ss), (k_sb, k_sh, k_ss) = q_strides, k_strides
    if min(batch, s_q, s_k, heads) == 0:
        raise GraphError(f"{where(node)}: empty attention ({batch} x {s_q} queries, {s_k} keys)")
    m_sb = m_sh = m_sq = m_sk = 0
    load_mask = "ld_f32"
    if mask is not None:
        m_sb, m_sh, m_sq, m_sk = _mask_strides(node, mask, {"b": batch, "h": heads, "q": s_q, "k": s_k})
        load_mask = word_type(mask.dtype, f"{where(node)} mask")[1]
    scale = op.score_scale if op.score_scale is not None else 1.0 / math.sqrt(head_dim)
    fields = dict(
        s_q=s_q,
        s_k=s_k,
        kv_len=s_k,
        group=heads // kv_heads,
        q=offsets[0],
        k=offsets[1],
        v=offsets[2],
        o=ctx.offset(node),
        mask=ctx.offset(mask) if mask is not None else 0,
        q_sb=q_sb,
        q_sh=q_sh,
        q_ss=q_ss,
        o_sb=o_strides[0],
        o_sh=o_strides[1],
        o_ss=o_strides[2],
        k_sb=k_sb,
        k_sh=k_sh,
        k_ss=k_ss,
        m_sb=m_sb,
        m_sh=m_sh,
        m_sq=m_sq,
        m_sk=m_sk,
        scale=scale,
        softcap=op.softcap or 0.0,
        window=op.window,
        kv_pos=ctx.offset(pos) if pos is not None else 0,
        # 2: one pos per batch entry (batched decode), read at pos + b
        kv_dyn=0 if pos is None else 2 if pos.numel > 1 else 1,
    )
    subs = {"D": head_dim, "MASK_KIND": int(op.mask_kind), "LOAD_MASK": load_mask}
    if s_q <= DECODE_MAX_Q and ctx.facts.cpu and rows_fit_loop_budget(s_k, head_dim):
        grid = (math.ceil(heads * s_q / ATTENTION_ROWS_WG), 1, batch)
        return [ctx.dispatch(ATTENTION_ROWS, node, grid, subs, operands=operands, **fields, heads=heads,
                             splits=1, part=0)]
    if s_q <= DECODE_MAX_Q:
        return _lower_decode(node, ctx, fields, subs, batch, heads, head_dim, operands)
    rows = flash_rows_step(node, ctx, fields, subs, batch, heads, operands)  # short heads
    if rows is not None:
        return [rows]
    if ctx.facts.loop_limited and not flash_fits_loop_budget(s_k, head_dim):
        return _lower_decode(node, ctx, fields, subs, batch, heads, head_dim, operands, row_kernel=False)
    grid = (math.ceil(s_q / FLASH_QUERIES), heads, batch)
    return [ctx.dispatch(ATTENTION_FLASH, node, grid, {**subs, **flash_tiles(head_dim)}, operands=operands,
                         **fields)]


def _lower_decode(
    node: Node, ctx: LowerCtx, fields: dict, subs: dict, batch: int, heads: int, head_dim: int,
    operands: Sequence[Node] | None, row_kernel: bool = True
) -> list[Step]:
    """attention_decode over (split, kv head x row chunk, batch): a workgroup takes ROWS query rows of one kv
    head's group (GQA heads x S_q) through each K/V row once; partial records need attention_combine.
    ``row_kernel``: an unsplit pass may take attention_decode_row instead (GPU kernels; on CPU adapters
    only while its walk stays within the loop budget)."""
    s_q, s_k, group = fields["s_q"], fields["s_k"], fields["group"]
    _, chunks = decode_blocks(heads, group, s_q, head_dim)
    kv_heads = heads // group
    rows = batch * heads * s_q
    unsplit = fields["kv_dyn"] >= 1 and s_k <= UNSPLIT_CACHE_KEYS
    splits = 1 if unsplit else _decode_splits(batch * kv_heads * chunks, rows, s_k, head_dim, ctx)
    row_kernel = row_kernel and (not ctx.facts.loop_limited or row_fits_loop_budget(s_k, head_dim))
    if splits == 1 and DECODE_ROW and row_kernel and not ctx.facts.cpu:
        return [decode_row_step(node, ctx, fields, subs, batch, heads, head_dim, operands)]
    part = (ctx.scratch[0] - ctx.window_base) // 4 if splits > 1 else 0
    padded = 4 * math.ceil(head_dim / 4)
    decode_subs = {**subs, "DG": DECODE_WG // (padded // 4), "QD": padded, **decode_batches(head_dim)}
    steps = [
        ctx.dispatch(
            ATTENTION_DECODE,
            node,
            (splits, kv_heads * chunks, batch),
            decode_subs,
            operands=operands,
            **fields,
            heads=heads,
            splits=splits,
            part=part,
        )
    ]
    if splits > 1:
        combine_subs = {"D": head_dim}
        steps.append(
            ctx.dispatch(
                ATTENTION_COMBINE,
                node,
                ctx.grid_rows(rows),
                combine_subs,
                operands=operands,
                rows=rows,
                heads=heads,
                s_q=s_q,
                splits=splits,
                part=part,
                o=fields["o"],
                o_sb=fields["o_sb"],
                o_sh=fields["o_sh"],
                o_ss=fields["o_ss"],
            )
        )
    return steps


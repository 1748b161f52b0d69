"""Matmul family: MatMul and FusedMatMulBiasAct. f32 GEMMs of many rows go to the tiled GEMM (bias/act
epilogue, batched over grid z); a 2-D weight with few rows, or any f16 weight (the f16 shadow), goes to
the skinny GEMM of matmul_skinny.py, which reads the weight once per block of <= 16 rows. GroupedMatMul
(MoE) is lowered in matmul_grouped.py.

The tiled GEMM's tile is BM x BN (64 or 128 each) on 16 x 16 threads, 4-wide vec4 groups per thread,
summing BK = 8 or 16 k per double-buffered step (``core``; the per-thread code is written out by
matmul_core.py); 128 x 64 tiles in 8-deep steps, or 64 x 64 in 16-deep ones for smaller grids, are the
default (TILES, CORES: measured below). Where every offset, row length and
split is a multiple of 4 elements the arena is bound as ``array<vec4<u32>>`` (16-byte loads and stores);
otherwise the same kernel loads words one by one with per-element bounds (views may start anywhere).

Split K: a plain MatMul whose grid leaves SMs idle or a last wave nearly empty (a weight's gradient,
X^T dY over every token: M and N are model widths, K the tokens; a prefill's projections) cuts K into
equal chunks (grid z = the chunk; ``k_splits``); each stores its partial product in the arena's scratch
(``@lowers(scratch=)``) and matmul_split_sum adds them in order (deterministic). The quantised GEMM
(quant_gguf.py) takes the same tiles and split.

Transposed operands (MatMul's transpose_a / transpose_b, which the gradient rules use for X^T dY and
dY W^T) are read in place by the tiled GEMM (TRANS_A / TRANS_B), never through the skinny one.
"""

from __future__ import annotations

import math

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, Kernel, kernel, params
from rlxpy.wgpu_backend.lowering import matmul_core, matmul_grouped, matmul_skinny  # noqa: F401  (grouped: registers)
from rlxpy.wgpu_backend.lowering.elementwise import ACTIVATION_WGSL
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

MATMUL_TILED = kernel(
    "matmul_tiled",
    # w_bytes, row_bytes: a GGUF weight's byte offset and row size (quant_gguf_gemm; 0 otherwise)
    params("MatmulTiledParams", ("m",), m=U32, n=U32, k=U32, a=U32, w=U32, y=U32, bias=U32, has_bias=U32,
           stride_a=U32, stride_w=U32, stride_y=U32, split1=U32, split2=U32, block_rows=U32, k_len=U32,
           w_bytes=U32, row_bytes=U32),
    dtypes=accepts(DType.F32, DType.F32, DType.F32, out=DType.F32),  # a, w, bias
    # the double-buffered a and w tiles, [2][BK][BM] and [2][BK][BN] (a 128 x 128 tile: 16 KiB)
    workgroup=(16, 16, 1), shared_bytes=lambda s: 16 * (int(s["A_VECS"]) + int(s["W_VECS"])),
    sizes={"A_VECS": 2 * 8 * 128 // 4, "W_VECS": 2 * 8 * 128 // 4}, extent_axis=1,
    # workgroup tiles indexed in range by construction, global reads guarded (include/matmul_access_*)
    checked=False)
BK = 8  # K per step of the tiles CORES does not list, and the unit of the K split's chunks
#: (BM, BN) from the largest; the first whose grid has at least MIN_GROUPS workgroups is taken (a grid
#: of 160 already fills an H100's 132 SMs). The core (lowering/matmul_core) writes everything per thread
#: out with constant indices: named vec4 accumulators and staged loads, 2-D workgroup tiles read at
#: constant rows, a K loop without branches; the kernel is compiled without runtime checks. On an H100
#: (benches/RESULTS.md, 2026-11-26, "the GEMM core's instruction stream") at 4096^3: 128x64 in 8-deep
#: steps with block sums per 64 of K 36.8 TFLOP/s (per 32: 36.3; one running sum 38.5), 64x128 with
#: per-quadrant step sums 32.6 (per 64 of K 34.8), 128x128 with one running sum 40.7 but with per-half
#: step sums 31.5 (a block sum costs it a second set of 64 accumulators), 64x64 16-deep 32.4. The
#: kernel takes any BM, BN in {64, 128, 256} (FORCE_TILE).
TILES = ((128, 64), (64, 64))
MIN_GROUPS = 160
MATMUL_SPLIT_SUM = kernel("matmul_split_sum", params("MatmulSplitSumParams", total=U32, splits=U32, part=U32,
                                                     y=U32), dtypes=accepts(DType.F32, out=DType.F32))
SPLIT_MAX = 16
#: ``k_splits``' model: workgroups that run at once at one per SM on the GPU it was tuned on (an
#: H100's or H200's 132 SMs; WebGPU does not say how many a device has), a workgroup's fixed cost (its
#: first step, stores) in K, and the shortest K chunk.
RESIDENT_GROUPS = 132
GROUP_COST_K = 64
LOAD_MIN_K = 64
#: Benches and tests only: force one (BM, BN), the word-by-word loads, or a number of K chunks (one
#: that does not divide K evenly into multiples of 8 leaves K whole). Not user flags.
FORCE_TILE: tuple[int, int] | None = None
VEC4 = True
FORCE_SPLITS: int | None = None
#: (BK, sums) per (BM, BN) tile (lowering/matmul_core); tiles not listed take (BK, "step"). FORCE_CORE
#: (benches and tests) sets one for every tile. Block sums keep the error against float64 under torch
#: f32's (one running sum is at torch's level, 2x it where torch splits K): 128x64 over each 64 of K
#: (0.18x torch's error at 4096^3, 2.1e-7 rms), 64x64 over each 16-deep step (16 KiB of workgroup
#: memory, WebGPU's minimum limit).
CORES: dict[tuple[int, int], tuple[int, str]] = {(128, 64): (8, "k64"), (64, 64): (16, "step")}
FORCE_CORE: tuple[int, str] | None = None
#: Tile rows per band of the workgroup walk (matmul_tiled's GROUP_ROWS; 0: as dispatched).
GROUP_ROWS = 0

def choose_tile(m: int, n: int, batch: int) -> tuple[int, int]:
    if FORCE_TILE is not None:
        return FORCE_TILE
    for bm, bn in TILES:
        if math.ceil(m / bm) * math.ceil(n / bn) * batch >= MIN_GROUPS:
            return bm, bn
    return TILES[-1]


def transposes(node: Node) -> tuple[bool, bool]:
    """(transpose_a, transpose_b) of a MatMul; (False, False) for the other matmul ops."""
    op = node.op
    return getattr(op, "transpose_a", False), getattr(op, "transpose_b", False)


def _dims(node: Node, a: Node, w: Node) -> tuple[int, int, int, int]:
    """(m, n, k, batch) of the tiled GEMM: a 2-D weight folds a's leading dims into the rows (a transposed
    a is 2-D then), else the leading dims are the batch."""
    trans_a, trans_b = transposes(node)
    k, n = (w.shape[-1], w.shape[-2]) if trans_b else (w.shape[-2], w.shape[-1])
    if w.rank == 2:
        return (a.shape[-1] if trans_a else matmul_skinny.rows_of(a, w)), n, k, 1
    return a.shape[-1 if trans_a else -2], n, k, math.prod(a.shape[:-2])


def _skinny(node: Node, a: Node, w: Node, bias: Node | None) -> bool:
    return not any(transposes(node)) and matmul_skinny.applies(a, w, bias)


def _plain_dims(node: Node, a: Node, w: Node) -> tuple[int, int, int, int] | None:
    """(m, n, k, batch) of a MatMul the tiled kernel takes with a 2-D weight; None otherwise."""
    if not isinstance(node.op, ops.MatMul) or w.rank != 2 or _skinny(node, a, w, None):
        return None
    dims = _dims(node, a, w)
    if not all(isinstance(d, int) for d in dims):
        return None
    return dims


def split_scratch_bytes(node: Node, graph) -> int:
    """Scratch the partial products of a split-K MatMul take (0 without a split)."""
    a, w = graph[node.inputs[0]], graph[node.inputs[1]]
    dims = _plain_dims(node, a, w)
    if dims is None:
        return 0
    splits = k_splits(*dims)
    return 0 if splits == 1 else 4 * splits * dims[0] * dims[1]


def core(bm: int, bn: int, storage: int = 1 << 30) -> tuple[int, str]:
    """(BK, sums) of the tiled GEMM for a BM x BN tile: CORES' (or FORCE_CORE's), else 8-deep steps
    when the double-buffered tiles of the deeper ones would not fit ``storage`` bytes."""
    bk, sums = FORCE_CORE or CORES.get((bm, bn), (BK, "step"))
    if 2 * 4 * bk * (bm + bn) > storage:
        return BK, sums
    return bk, sums


def tiled_source(bm: int, bn: int, vec4: bool, expr: str, trans: tuple[bool, bool] = (False, False),
                 bk: int | None = None, sums: str | None = None) -> dict[str, object]:
    """The placeholders of matmul_tiled.wgsl for one tile shape, access mode (include/matmul_access_*),
    operand layout (``trans``: a stored [K, M], w stored [N, K]), K step and block sum (matmul_core;
    unset: the tile's ``core``)."""
    if bk is None or sums is None:
        bk, sums = core(bm, bn)
    loads = {"a": max(1, bk * bm // 1024), "w": max(1, bk * bn // 1024)}  # vec4s per thread and step
    moves = [(x, r, f"flat + {256 * r}u") for x in "aw" for r in range(loads[x])]
    origin = {"a": "a_base, row0", "w": "w_base, col0"}
    fetch = " ".join(f"s{x}{r} = fetch_{x}({origin[x]}, {{k0}}, {v});" for x, r, v in moves)
    stage = " ".join(f"stage_{x}({{half}}u, {v}, s{x}{r});" for x, r, v in moves)
    first = [f"    var s{x}{r} = fetch_{x}({origin[x]}, 0u, {v});" for x, r, v in moves]
    first += [f"    stage_{x}(0u, {v}, s{x}{r});" for x, r, v in moves]
    return {"ACCESS": "vec4" if vec4 else "words", "EXPR": expr, "BM": bm, "BN": bn, "BK": bk,
            "A_VECS": 2 * bk * bm // 4, "W_VECS": 2 * bk * bn // 4, "A_COLS": bm // 4, "W_COLS": bn // 4,
            "K_ROWS": 2 * bk, "GROUP_ROWS": GROUP_ROWS, "ACC": matmul_core.declarations(bm, bn, bk, sums),
            "FIRST": "\n".join(first), "K_LOOP": matmul_core.k_loop(bm, bn, bk, sums, fetch, stage),
            "STORE": matmul_core.stores(bm, bn, "finish(y_base, row + {row}u, col + {col}u, {acc});"),
            "TRANS_A": str(trans[0]).lower(), "TRANS_B": str(trans[1]).lower()}


def vec4_access(fields: dict[str, int], trans_a: bool) -> bool:
    """16-byte accesses need every start and row length on a 4-element boundary (a transposed a's rows
    are m long)."""
    names = ("n", "k", "a", "w", "y", "bias", "split1", "split2") + (("m",) if trans_a else ())
    return VEC4 and all(fields[f] % 4 == 0 for f in names)


def tiled_gemm(node: Node, ctx: LowerCtx, a: Node, w: Node, bias: Node | None, act,
               splits: tuple[int, int] | None = None) -> list[Step]:
    """The tiled GEMM; ``splits`` = (split1, split2) stores the columns as three blocks (SplitMatMul)."""
    m, n, k, batch = _dims(node, a, w)  # a 2-D weight: one GEMM over all of a's leading rows
    trans = transposes(node)
    if batch > 65535:
        raise UnsupportedOpError(f"{where(node)}: batch {batch} exceeds 65535 workgroups")
    split1, split2 = splits if splits else (n, n)
    fields = dict(m=m, n=n, k=k, a=ctx.offset(a), w=ctx.offset(w), y=ctx.offset(node),
                  bias=ctx.offset(bias) if bias is not None else 0, has_bias=int(bias is not None),
                  stride_a=m * k if batch > 1 else 0, stride_w=k * n if batch > 1 else 0,
                  stride_y=m * n if batch > 1 else 0, split1=split1, split2=split2, block_rows=m, k_len=k,
                  w_bytes=0, row_bytes=0)
    plain = _plain_dims(node, a, w) is not None and bias is None and act is None and splits is None
    chunks = fitting_splits(ctx, m, n, k_splits(m, n, k, 1)) if plain else 1
    expr = ACTIVATION_WGSL[act] if act is not None else "v"
    # rows scale with the active extent only when they are the flattened leading dims
    return tiled_steps(node, ctx, MATMUL_TILED, fields, trans, vec4_access(fields, trans[0]), expr, chunks,
                       batch, scalable=w.rank == 2 and not trans[0])


def k_splits(m: int, n: int, k: int, batch: int) -> int:
    """K chunks of an unbatched GEMM (1 for a batched one): the count that minimises the work of the
    busiest SM, ceil(workgroups / RESIDENT_GROUPS) workgroups of K / chunks + GROUP_COST_K each, the
    fewest on a tie (each chunk adds its partial product to the sum pass). K is cut into equal
    multiples of the 8-deep step, at least LOAD_MIN_K long.

    On an H100 (benches/RESULTS.md, 2026-11-26, every count of 1-8 forced) this picks the fastest
    count, or one within 5% of it, for SmolLM2's four quantised weight shapes at 128, 256 and 512
    rows: the four take 63 / 141 us (128 / 512 rows) against 74 / 156 with the rule before it (aim
    at 1,024 workgroups in chunks of at least 256: a 576-long K was cut in two at most); the GPT
    training step (its weight gradients, K = 4096 tokens) 16.3-16.4 -> 15.9 ms."""
    if batch != 1:
        return 1
    if FORCE_SPLITS is not None:
        return FORCE_SPLITS if k % (FORCE_SPLITS * BK) == 0 else 1
    bm, bn = choose_tile(m, n, 1)
    groups = math.ceil(m / bm) * math.ceil(n / bn)
    counts = [1] + [s for s in range(2, SPLIT_MAX + 1) if k % (s * BK) == 0 and k // s >= LOAD_MIN_K]
    return min(counts, key=lambda s: (math.ceil(groups * s / RESIDENT_GROUPS) * (k // s + GROUP_COST_K), s))


def fitting_splits(ctx: LowerCtx, m: int, n: int, chunks: int) -> int:
    """``chunks`` when the scratch inside this step's binding holds their partial products of an m x n
    GEMM (or there is one chunk); else 1."""
    base, size = ctx.scratch
    inside = base >= ctx.window_base and base + size <= ctx.window_base + ctx.window_size
    return chunks if chunks > 1 and inside and size >= 4 * chunks * m * n else 1


def tiled_steps(node: Node, ctx: LowerCtx, gemm: Kernel, fields: dict[str, int], trans: tuple[bool, bool],
                vec4: bool, expr: str = "v", chunks: int = 1, batch: int = 1,
                subs: dict[str, object] | None = None, scalable: bool = True) -> list[Step]:
    """The tiled GEMM of ``fields`` (MatmulTiledParams) by ``gemm`` (matmul_tiled, or a kernel built on
    its core): one dispatch, or with ``chunks`` > 1 the K chunks into the scratch (grid z = the chunk)
    and matmul_split_sum adding them into y. A split runs in full (the partial blocks' layout is fixed
    at compile time). ``subs``: the kernel's own placeholders."""
    m, n = fields["m"], fields["n"]
    bm, bn = choose_tile(m, n, batch)
    bk, sums = core(bm, bn, ctx.facts.max_workgroup_storage)
    if chunks > 1:
        part = (ctx.scratch[0] - ctx.window_base) // 4
        k_len = fields["k"] // chunks
        # the chunk's first k: k_len columns on in a's rows (k_len rows down a transposed a), k_len rows
        # down w (k_len columns on in a transposed w's rows)
        fields = {**fields, "y": part, "k_len": k_len, "stride_a": k_len * m if trans[0] else k_len,
                  "stride_w": k_len if trans[1] else k_len * n, "stride_y": m * n}
        batch, scalable, vec4 = chunks, False, vec4 and part % 4 == 0
    grid = (max(1, math.ceil(n / bn)), max(1, math.ceil(m / bm)), batch)
    source = {**tiled_source(bm, bn, vec4, expr, trans, bk, sums), **(subs or {})}
    steps = [ctx.dispatch(gemm, node, grid, source, scalable=scalable, **fields)]
    if chunks == 1:
        return steps
    total = m * n
    return [*steps, ctx.dispatch(MATMUL_SPLIT_SUM, node, ctx.grid_1d(total), scalable=False, operands=[node],
                                 total=total, splits=chunks, part=part, y=ctx.offset(node))]


def gemm(node: Node, ctx: LowerCtx, a: Node, w: Node, bias: Node | None, act,
         splits: tuple[int, int] | None = None) -> list[Step]:
    """Few rows on a 2-D weight (or an f16 weight): the skinny GEMM; otherwise the tiled one. ``splits``
    = (split1, split2) stores the columns as three blocks (SplitMatMul, lowered below)."""
    if _skinny(node, a, w, bias):
        return matmul_skinny.skinny_gemm(node, ctx, a, w, bias, act, splits)
    return tiled_gemm(node, ctx, a, w, bias, act, splits)


@lowers(ops.MatMul, scratch=split_scratch_bytes)
def lower_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    a, w = ctx.inputs(node)
    return gemm(node, ctx, a, w, None, None)


@lowers(ops.FusedMatMulBiasAct)
def lower_fused_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    a, w, bias = ctx.inputs(node)
    return gemm(node, ctx, a, w, bias, node.op.activation)


@lowers(ops.SplitMatMul)
def lower_split_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    """One GEMM whose epilogue stores column part p as its own [rows, width_p] block."""
    op: ops.SplitMatMul = node.op  # type: ignore[assignment]
    a, w, *bias = ctx.inputs(node)
    if len(op.widths) > 3:
        raise UnsupportedOpError(f"{where(node)}: the GEMM epilogue stores at most 3 column blocks, "
                                 f"got widths {op.widths}")
    bounds = [sum(op.widths[: i + 1]) for i in range(len(op.widths))]
    splits = (bounds[0], bounds[1] if len(bounds) > 2 else bounds[-1])
    return gemm(node, ctx, a, w, bias[0] if bias else None, op.activation, splits)

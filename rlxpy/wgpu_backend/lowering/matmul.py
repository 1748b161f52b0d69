"""Matmul family: MatMul and FusedMatMulBiasAct. f32 GEMMs of many rows go to the tiled GEMM (bias/act
epilogue, batched over grid z); a 2-D weight with few rows, or any f16 weight (the f16 shadow), goes to
the skinny GEMM of matmul_skinny.py, which reads the weight once per block of <= 16 rows. GroupedMatMul
(MoE) is lowered in matmul_grouped.py.

The tiled GEMM's tile is BM x BN (64 or 128 each) on 16 x 16 threads, 4-wide vec4 groups per thread;
the larger tile wins while it still gives the GPU enough workgroups. Where every offset, row length and
split is a multiple of 4 elements the arena is bound as ``array<vec4<u32>>`` (16-byte loads and stores);
otherwise the same kernel loads words one by one with per-element bounds (views may start anywhere).
"""

from __future__ import annotations

import math

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering import matmul_grouped, matmul_skinny  # noqa: F401  (grouped: registers)
from rlxpy.wgpu_backend.lowering.elementwise import ACTIVATION_WGSL
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

MATMUL_TILED = kernel(
    "matmul_tiled",
    params("MatmulTiledParams", ("m",), m=U32, n=U32, k=U32, a=U32, w=U32, y=U32, bias=U32, has_bias=U32,
           stride_a=U32, stride_w=U32, stride_y=U32, split1=U32, split2=U32, block_rows=U32),
    dtypes=accepts(DType.F32, DType.F32, DType.F32, out=DType.F32),  # a, w, bias
    # the double-buffered a and w tiles, [2][BK][BM] and [2][BK][BN] (a 128 x 128 tile: 16 KiB)
    workgroup=(16, 16, 1), shared_bytes=lambda s: 16 * (int(s["A_VECS"]) + int(s["W_VECS"])),
    sizes={"A_VECS": 2 * 8 * 128 // 4, "W_VECS": 2 * 8 * 128 // 4}, extent_axis=1)
BK = 8  # K per step (kernel constant)
#: (BM, BN) from the largest; the first whose grid has at least MIN_GROUPS workgroups is taken. On an
#: H100, 64x128 (4 x 8 per thread) matched or beat 128x128 at 2048^3 and 4096^3 (28.6 TFLOP/s), and
#: 64x64 won once 64x128 gave fewer than ~256 workgroups (M = 64 or 128 on N = 8192, 1024^3).
#: The kernel also takes 128x128 and 128x64 (FORCE_TILE).
TILES = ((64, 128), (64, 64))
MIN_GROUPS = 256
#: Benches only: force one (BM, BN), or the word-by-word loads. Not user flags.
FORCE_TILE: tuple[int, int] | None = None
VEC4 = True

def choose_tile(m: int, n: int, batch: int) -> tuple[int, int]:
    if FORCE_TILE is not None:
        return FORCE_TILE
    for bm, bn in TILES:
        if math.ceil(m / bm) * math.ceil(n / bn) * batch >= MIN_GROUPS:
            return bm, bn
    return TILES[-1]


def fma_block(bm: int, bn: int) -> str:
    """The sums of one K step, unrolled: per k, BM/64 + BN/64 vec4 reads feed BM*BN/64 vec4 FMAs
    (written out so no loop counts against lavapipe's per-thread iteration limit)."""
    hs, gs = bm // 64, bn // 64
    lines = []
    for kk in range(BK):
        lines.append("        {")
        lines += [f"            let a{h} = tile_a[ta + {kk * bm // 4 + 16 * h}u];" for h in range(hs)]
        lines += [f"            let w{g} = tile_w[tw + {kk * bn // 4 + 16 * g}u];" for g in range(gs)]
        for h in range(hs):
            for i, lane in enumerate("xyzw"):
                for g in range(gs):
                    acc = (4 * h + i) * gs + g
                    lines.append(f"            acc[{acc}] = acc[{acc}] + a{h}.{lane} * w{g};")
        lines.append("        }")
    return "\n".join(lines)


def store_block(bm: int, bn: int) -> str:
    hs, gs = bm // 64, bn // 64
    return "\n".join(f"    finish(y_base, row + {64 * h + i}u, col + {64 * g}u, acc[{(4 * h + i) * gs + g}]);"
                     for h in range(hs) for i in range(4) for g in range(gs))


def tiled_source(bm: int, bn: int, vec4: bool, expr: str) -> dict[str, object]:
    """The placeholders of matmul_tiled.wgsl for one tile shape and access mode (include/matmul_access_*)."""
    return {"ACCESS": "vec4" if vec4 else "words", "EXPR": expr, "BM": bm, "BN": bn,
            "A_VECS": 2 * BK * bm // 4, "W_VECS": 2 * BK * bn // 4, "ACC": bm * bn // 64,
            "FMA": fma_block(bm, bn), "STORE": store_block(bm, bn)}


def tiled_gemm(node: Node, ctx: LowerCtx, a: Node, w: Node, bias: Node | None, act,
               splits: tuple[int, int] | None = None) -> list[Step]:
    """The tiled GEMM; ``splits`` = (split1, split2) stores the columns as three blocks (SplitMatMul)."""
    k, n = w.shape[-2], w.shape[-1]
    if w.rank == 2:  # [..., M, K] x [K, N]: one GEMM over all leading rows
        m, batch = matmul_skinny.rows_of(a, w), 1
    else:
        m, batch = a.shape[-2], math.prod(a.shape[:-2])
    if batch > 65535:
        raise UnsupportedOpError(f"{where(node)}: batch {batch} exceeds 65535 workgroups")
    split1, split2 = splits if splits else (n, n)
    fields = dict(m=m, n=n, k=k, a=ctx.offset(a), w=ctx.offset(w), y=ctx.offset(node),
                  bias=ctx.offset(bias) if bias is not None else 0, has_bias=int(bias is not None),
                  stride_a=m * k if batch > 1 else 0, stride_w=k * n if batch > 1 else 0,
                  stride_y=m * n if batch > 1 else 0, split1=split1, split2=split2, block_rows=m)
    # 16-byte accesses need every start and row length on a 4-element boundary (bias, y, splits too)
    vec4 = VEC4 and all(fields[f] % 4 == 0 for f in ("n", "k", "a", "w", "y", "bias", "split1", "split2"))
    bm, bn = choose_tile(m, n, batch)
    expr = ACTIVATION_WGSL[act] if act is not None else "v"
    grid = (max(1, math.ceil(n / bn)), max(1, math.ceil(m / bm)), batch)
    # rows scale with the active extent only when they are the flattened leading dims
    return [ctx.dispatch(MATMUL_TILED, node, grid, tiled_source(bm, bn, vec4, expr), scalable=w.rank == 2,
                         **fields)]


def gemm(node: Node, ctx: LowerCtx, a: Node, w: Node, bias: Node | None, act,
         splits: tuple[int, int] | None = None) -> list[Step]:
    """Few rows on a 2-D weight (or an f16 weight): the skinny GEMM; otherwise the tiled one. ``splits``
    = (split1, split2) stores the columns as three blocks (SplitMatMul, lowered below)."""
    if matmul_skinny.applies(a, w, bias):
        return matmul_skinny.skinny_gemm(node, ctx, a, w, bias, act, splits)
    return tiled_gemm(node, ctx, a, w, bias, act, splits)


@lowers(ops.MatMul)
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

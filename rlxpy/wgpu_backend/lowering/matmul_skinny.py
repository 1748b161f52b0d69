"""The skinny GEMM: ``act(a @ w + bias)`` with a 2-D weight, one pass over w per block of <= 16 rows.

It serves every f16 weight (the f16 shadow of shadow.py, or an f16 param in the graph): each lane
reads one u32 word per weight row, two f16 columns, and ``unpack2x16float`` widens them. That
builtin is core WGSL, so no ``shader-f16`` is needed, and it is exact on lavapipe, subnormals
included (tests check it); naga 29 rejects ``bitcast<vec2<f16>>(u32)``, the native alternative.
Accumulation is f32, like torch's fp16 GEMMs. An odd ``n`` puts every other row at an odd half:
the load then takes the pair from two words.

f32 weights come here when the GEMM has at most ``F32_MAX_ROWS`` rows: the tiled GEMM (matmul.py)
would spend most of a 64-row tile on padding, with one workgroup per 64 columns walking all of K.
``SKINNY_F32`` routes every 2-D f32 weight here, or none (benches compare kernels). SplitMatMul's
three-block store is supported as in the tiled GEMM, so a split and an unsplit projection sum in the
same order.
"""

from __future__ import annotations

import math

from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.elementwise import ACTIVATION_WGSL
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, fits

MAX_ROWS = 16  # rows per block: 16 accumulator pairs per lane; more rows re-read w once per block
MAX_WY = 32  # row lanes per workgroup (32 x 32 = 1024 invocations where the device allows)
# Past 8 rows per block, 16 row lanes: a 1024-lane workgroup leaves 64 registers per lane on NVIDIA,
# too few for 16 accumulator pairs without spilling
WIDE_ROWS = 8
# f32 weights: here up to this many rows, the tiled GEMM past them. H100, 8192 x 8192 weight: skinny
# 0.12 / 0.22 / 0.81 / 0.96 ms at M = 1 / 4 / 8 / 16, tiled 0.72-0.75 ms for any M <= 64. At M = 8 the
# tiled GEMM is 9% faster there, but its grid (N / 64 workgroups each walking all of K) shrinks with
# narrower weights, where the skinny kernel splits K over row lanes: 8 stays here.
F32_MAX_ROWS = 8
SKINNY_F32: bool | None = None  # benches: True = every 2-D f32 weight here, False = none (not a user flag)

MATMUL_SKINNY = kernel(
    "matmul_skinny",
    params("MatmulSkinnyParams", ("m",), m=U32, n=U32, k=U32, a=U32, w=U32, y=U32, bias=U32, has_bias=U32,
           split1=U32, split2=U32, block_rows=U32),
    dtypes=accepts(DType.F32, (DType.F32, DType.F16), DType.F32, out=DType.F32),  # a, w, bias
    # WY row lanes of 32 (8 on a 256-invocation device), a vec2 partial sum per invocation
    workgroup=(32, "WY", 1), shared_bytes=lambda s: 8 * 32 * int(s["WY"]), sizes={"WY": 8}, extent_axis=1)

def rows_of(a: Node, w: Node) -> int:
    """GEMM rows of ``a @ w`` with a 2-D weight: every leading dim of ``a`` flattened."""
    return math.prod(a.shape[:-1])


def applies(a: Node, w: Node, bias: Node | None = None) -> bool:
    """2-D f16 weights (f32 ``a`` and bias); 2-D f32 weights with at most F32_MAX_ROWS rows."""
    if w.rank != 2 or a.dtype is not DType.F32 or (bias is not None and bias.dtype is not DType.F32):
        return False
    if w.dtype is DType.F16:
        return True
    if w.dtype is not DType.F32:
        return False
    if SKINNY_F32 is not None:
        return SKINNY_F32
    return rows_of(a, w) <= F32_MAX_ROWS


def row_lanes(k: int, rows: int, ctx: LowerCtx) -> int:
    """WY: a power of two within the device's invocation and workgroup-memory limits, and no more
    than the weight has rows."""
    widest = MAX_WY if rows <= WIDE_ROWS else MAX_WY // 2
    lanes = 1
    while lanes * 2 <= widest and lanes < k and fits(MATMUL_SKINNY, ctx.facts, {"WY": lanes * 2}):
        lanes *= 2
    return lanes


def skinny_gemm(node: Node, ctx: LowerCtx, a: Node, w: Node, bias: Node | None, act,
                splits: tuple[int, int] | None = None) -> list[Step]:
    """``splits`` = (split1, split2): store the columns as three blocks, as the tiled GEMM does."""
    k, n = w.shape
    m = rows_of(a, w)
    mr = max(1, min(m, MAX_ROWS))
    wy = row_lanes(k, mr, ctx)
    grid = (max(1, math.ceil(n / 64)), max(1, math.ceil(m / mr)), 1)
    subs = {"EXPR": ACTIVATION_WGSL[act] if act is not None else "v", "MR": mr, "WY": wy, "PARTS": 32 * wy,
            "W_TYPE": {DType.F32: "f32", DType.F16: "f16"}[w.dtype]}
    unit = w.dtype.itemsize
    split1, split2 = splits if splits else (n, n)
    return [ctx.dispatch(MATMUL_SKINNY, node, grid, subs, m=m, n=n, k=k, a=ctx.offset(a),
                         w=ctx.offset(w, unit), y=ctx.offset(node),
                         bias=ctx.offset(bias) if bias is not None else 0, has_bias=int(bias is not None),
                         split1=split1, split2=split2, block_rows=m)]

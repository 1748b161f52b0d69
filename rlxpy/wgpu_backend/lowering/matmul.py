"""Matmul family: MatMul and FusedMatMulBiasAct on f32 (tiled GEMM with a bias/act epilogue); an f16
weight (the f16 shadow) goes to the skinny GEMM of matmul_skinny.py."""

from __future__ import annotations

import math

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.kernels.wgsl import PRELUDE
from rlxpy.wgpu_backend.lowering import matmul_skinny
from rlxpy.wgpu_backend.lowering.elementwise import ACTIVATION_WGSL
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

MATMUL_TILED = kernel(
    "matmul_tiled",
    params("MatmulTiledParams", ("m",), m=U32, n=U32, k=U32, a=U32, w=U32, y=U32, bias=U32, has_bias=U32,
           stride_a=U32, stride_w=U32, stride_y=U32, split1=U32, split2=U32, block_rows=U32),
    workgroup=(16, 16, 1), shared_bytes=8192, extent_axis=1)
TILE = 64


def gemm(node: Node, ctx: LowerCtx, a: Node, w: Node, bias: Node | None, act,
         splits: tuple[int, int] | None = None) -> list[Step]:
    """The tiled GEMM; ``splits`` = (split1, split2) stores the columns as three blocks (SplitMatMul)."""
    for t in (a, w, *(x for x in (bias,) if x is not None)):
        if t.dtype is not DType.F32:
            raise UnsupportedOpError(f"{where(node)}: f32 matmul only, got {t.type}")
    k, n = w.shape[-2], w.shape[-1]
    if w.rank == 2:  # [..., M, K] x [K, N]: one GEMM over all leading rows
        m, batch = a.numel // k, 1
    else:
        m, batch = a.shape[-2], math.prod(a.shape[:-2])
    if batch > 65535:
        raise UnsupportedOpError(f"{where(node)}: batch {batch} exceeds 65535 workgroups")
    expr = ACTIVATION_WGSL[act] if act is not None else "v"
    grid = (max(1, math.ceil(n / TILE)), max(1, math.ceil(m / TILE)), batch)
    # rows scale with the active extent only when they are the flattened leading dims
    return [ctx.dispatch(MATMUL_TILED, node, grid, {"PRELUDE": PRELUDE, "EXPR": expr}, scalable=w.rank == 2,
                         m=m, n=n, k=k, a=ctx.offset(a), w=ctx.offset(w), y=ctx.offset(node),
                         bias=ctx.offset(bias) if bias is not None else 0, has_bias=int(bias is not None),
                         stride_a=m * k if batch > 1 else 0, stride_w=k * n if batch > 1 else 0,
                         stride_y=m * n if batch > 1 else 0, split1=splits[0] if splits else n,
                         split2=splits[1] if splits else n, block_rows=m)]


@lowers(ops.MatMul)
def lower_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    a, w = ctx.inputs(node)
    if matmul_skinny.applies(a, w):
        return matmul_skinny.skinny_gemm(node, ctx, a, w, None, None)
    return gemm(node, ctx, a, w, None, None)


@lowers(ops.FusedMatMulBiasAct)
def lower_fused_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    a, w, bias = ctx.inputs(node)
    if matmul_skinny.applies(a, w, bias):
        return matmul_skinny.skinny_gemm(node, ctx, a, w, bias, node.op.activation)
    return gemm(node, ctx, a, w, bias, node.op.activation)

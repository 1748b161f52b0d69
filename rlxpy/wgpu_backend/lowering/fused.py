"""Lowerers of the pattern-pass ops that reuse a family's kernel with a different store:
SplitMatMul (the tiled GEMM storing column blocks) and ResidualNormTee (norm_rows also storing the
sum). PackedAttention lives with attention.py, whose kernels it shares."""

from __future__ import annotations

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.lowering.matmul import gemm
from rlxpy.wgpu_backend.lowering.norm import norm_rows
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers


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


@lowers(ops.ResidualNormTee)
def lower_residual_norm_tee(node: Node, ctx: LowerCtx) -> list[Step]:
    """norm_rows over x + residual, storing the sum in part 0 of the output and the norm in part 1."""
    op: ops.ResidualNormTee = node.op  # type: ignore[assignment]
    x, residual, gamma, *beta = ctx.inputs(node)
    return norm_rows(node, ctx, not op.rms, x, residual, None, gamma, beta[0] if beta else None, op.eps,
                     "ResidualNormTee", tee=ctx.offset(node))

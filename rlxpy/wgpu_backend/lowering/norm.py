"""Norm family: Softmax (any axis), LayerNorm, RmsNorm, FusedResidualLN, FusedResidualRmsNorm on f32.

Softmax on contiguous rows longer than 32 runs one workgroup per row (norm_softmax_rows: an online
max/sum pass, then a write pass); other axes and short rows run one thread per line
(norm_softmax_lines; lines too long for the loop budget of reduce.py go in chunked dispatches). The
four norms share norm_rows: one workgroup per last-axis row, the fused residual sum recomputed in
each pass, LayerNorm with a centred two-pass variance.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.shape import normalize_axis
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.lowering import norm_channels  # noqa: F401  (GroupNorm, BatchNorm)
from rlxpy.wgpu_backend.lowering.reduce import chunks, row_lanes, split_axes, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

F32_ONLY = accepts(rest=DType.F32, out=DType.F32)  # every input (x, residual, bias, gamma, beta) f32
NORM_SOFTMAX_ROWS = kernel("norm_softmax_rows", params(
    "NormSoftmaxRowsParams", ("rows",), rows=U32, cols=U32, x=U32, y=U32), dtypes=F32_ONLY,
    shared_bytes=lambda s: 2 * 4 * int(s["WG"]), extent_axis=0)
NORM_SOFTMAX_LINES = kernel("norm_softmax_lines", params(
    "NormSoftmaxLinesParams", ("lines",), lines=U32, axis_dim=U32, inner=U32, start=U32, count=U32, phase=U32,
    x=U32, y=U32), dtypes=F32_ONLY, extent_axis=0)
NORM_ROWS = kernel("norm_rows", params(
    "NormRowsParams", ("rows",), rows=U32, cols=U32, x=U32, residual=U32, bias=U32, gamma=U32, beta=U32,
    y=U32, has_residual=U32, has_bias=U32, has_beta=U32, center=U32, eps=F32, tee=U32, has_tee=U32),
    dtypes=F32_ONLY, shared_bytes=lambda s: 4 * int(s["WG"]), extent_axis=0)

#: Contiguous softmax rows up to this length run one thread per row (a workgroup would idle).
SOFTMAX_LINE_MAX_COLS = 32
#: norm_softmax_lines phases: both passes in one dispatch / statistics of one chunk / outputs of one chunk.
BOTH_PASSES, STATISTICS, OUTPUTS = 0, 1, 2


@lowers(ops.Softmax)
def lower_softmax(node: Node, ctx: LowerCtx) -> list[Step]:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``, like torch.softmax (a row holding NaN,
    +inf, or only -inf comes out all NaN)."""
    (x,) = ctx.inputs(node)
    axis = normalize_axis(node.op.axis, x.rank)
    outer, axis_dim, inner = split_axes(x.shape, axis, axis)
    if node.numel == 0:
        return []
    scalable = axis > 0  # the active extent cannot cut a softmax across the leading axis
    if inner == 1 and axis_dim > SOFTMAX_LINE_MAX_COLS:
        lanes = row_lanes(axis_dim)
        steps_per_dispatch(node, 2 * math.ceil(axis_dim / lanes), 32, "Softmax")
        subs = {"WG": lanes}
        return [ctx.dispatch(NORM_SOFTMAX_ROWS, node, ctx.grid_rows(outer), subs, scalable, rows=outer,
                             cols=axis_dim, x=ctx.offset(x), y=ctx.offset(node))]
    lines = outer * inner
    per_dispatch = steps_per_dispatch(node, 1, 16, "Softmax")
    if 2 * axis_dim <= per_dispatch or axis_dim < 2:
        order = [(BOTH_PASSES, (0, axis_dim))]
    else:
        # long lines: (max, sum) chunk by chunk, kept in y[o, 0:2, i]; then the outputs, last chunk
        # first, so the chunk holding that state overwrites it only after reading it
        pieces = chunks(axis_dim, max(2, per_dispatch))
        order = [(STATISTICS, piece) for piece in pieces] + [(OUTPUTS, piece) for piece in reversed(pieces)]
    return [ctx.dispatch(NORM_SOFTMAX_LINES, node, ctx.grid_1d(lines), None, scalable,
                         lines=lines, axis_dim=axis_dim, inner=inner, start=start, count=count, phase=phase,
                         x=ctx.offset(x), y=ctx.offset(node))
            for phase, (start, count) in order]


def norm_rows(node: Node, ctx: LowerCtx, center: bool, x: Node, residual: Node | None, bias: Node | None,
              gamma: Node, beta: Node | None, eps: float, what: str, tee: int | None = None) -> list[Step]:
    """One norm_rows dispatch; ``tee`` = arena element offset where the sum x + residual is stored
    too (ResidualNormTee, whose output holds the sum then the norm)."""
    cols = x.shape[-1]
    if x.numel == 0:
        return []
    rows = x.numel // cols
    lanes = row_lanes(cols)
    steps_per_dispatch(node, 3 * math.ceil(cols / lanes), 32, what)
    fields = {"residual": 0, "bias": 0, "beta": 0}  # an absent operand: offset 0, flag 0, never read
    for name, t in (("residual", residual), ("bias", bias), ("beta", beta)):
        if t is not None:
            fields[name] = ctx.offset(t)
    flags = {"has_residual": int(residual is not None), "has_bias": int(bias is not None),
             "has_beta": int(beta is not None)}
    y = ctx.offset(node) + (x.numel if tee is not None else 0)
    return [ctx.dispatch(NORM_ROWS, node, ctx.grid_rows(rows), {"WG": lanes},
                         rows=rows, cols=cols, x=ctx.offset(x), gamma=ctx.offset(gamma), y=y,
                         center=int(center), eps=eps, tee=tee or 0, has_tee=int(tee is not None), **fields,
                         **flags)]


@lowers(ops.LayerNorm)
def lower_layer_norm(node: Node, ctx: LowerCtx) -> list[Step]:
    """torch.nn.functional.layer_norm over the last axis (biased variance); beta optional."""
    x, gamma, *beta = ctx.inputs(node)
    return norm_rows(node, ctx, True, x, None, None, gamma, beta[0] if beta else None, node.op.eps,
                     "LayerNorm")


@lowers(ops.RmsNorm)
def lower_rms_norm(node: Node, ctx: LowerCtx) -> list[Step]:
    """torch.nn.functional.rms_norm over the last axis, plus beta when given."""
    x, gamma, *beta = ctx.inputs(node)
    return norm_rows(node, ctx, False, x, None, None, gamma, beta[0] if beta else None, node.op.eps,
                     "RmsNorm")


def _residual_inputs(node: Node, ctx: LowerCtx) -> tuple[Node, Node, Node | None, Node, Node]:
    inputs = ctx.inputs(node)
    x, residual = inputs[0], inputs[1]
    bias = inputs[2] if node.op.has_bias else None
    return x, residual, bias, inputs[-2], inputs[-1]


@lowers(ops.FusedResidualLN)
def lower_fused_residual_ln(node: Node, ctx: LowerCtx) -> list[Step]:
    """LayerNorm(x + residual (+ bias)) in one dispatch; the sum is never stored."""
    x, residual, bias, gamma, beta = _residual_inputs(node, ctx)
    return norm_rows(node, ctx, True, x, residual, bias, gamma, beta, node.op.eps, "FusedResidualLN")


@lowers(ops.FusedResidualRmsNorm)
def lower_fused_residual_rms_norm(node: Node, ctx: LowerCtx) -> list[Step]:
    """RmsNorm(x + residual (+ bias)) * gamma + beta in one dispatch."""
    x, residual, bias, gamma, beta = _residual_inputs(node, ctx)
    return norm_rows(node, ctx, False, x, residual, bias, gamma, beta, node.op.eps, "FusedResidualRmsNorm")


@lowers(ops.ResidualNormTee)
def lower_residual_norm_tee(node: Node, ctx: LowerCtx) -> list[Step]:
    """norm_rows over x + residual, storing the sum in part 0 of the output and the norm in part 1."""
    op: ops.ResidualNormTee = node.op  # type: ignore[assignment]
    x, residual, gamma, *beta = ctx.inputs(node)
    return norm_rows(node, ctx, not op.rms, x, residual, None, gamma, beta[0] if beta else None, op.eps,
                     "ResidualNormTee", tee=ctx.offset(node))

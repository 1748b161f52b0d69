"""Backward family on f32: each op the exact gradient of its forward, lowered to its own kernels.

* RmsNormBackwardInput / LayerNormBackwardInput: backward_norm_rows, one workgroup per row (the row's
  statistics and its two dot products with dy * gamma, then dx).
* RmsNormBackwardGamma / LayerNormBackwardGamma / RmsNormBackwardBeta: column sums over the rows in
  two phases through scratch (backward_norm_columns: partial sums per chunk of CHUNK_ROWS rows, then
  the chunks), after backward_norm_stats stored each row's (mean, 1/std) for the gamma gradients.
* RopeBackward: backward_rope, the rotation by -theta (one thread per element).
* CumsumBackward: backward_cumsum, a suffix scan per line, chunked by the loop budget.
* GatherBackward: backward_gather, a scatter-add without atomics: one workgroup per table row and
  column block scans the indices and adds the matching dy rows in order (deterministic).
* CrossEntropyBackward: backward_cross_entropy, one workgroup per row: (softmax - onehot) * dy.
* ActivationBackward: backward_activation, dy * fn'(t), one thread per element.
* AttentionBackward: backward_attention.py (flash-attention-2 style kernels with recomputation).
* SelectiveScanBackward: backward_scan.py (states recomputed, the adjoint walked back per channel).
* PoolBackward: backward_pool.py (per input element, the windows that hold it).
* GatedDeltaNetBackward: backward_scan_delta.py (states stored, the adjoint walked back per column).

A node whose scratch lies outside its bind window (an arena bigger than one binding) runs its
reference as a host step instead.
"""

from __future__ import annotations

import math

from rlxpy.errors import GraphError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.backward import FROM_OUTPUT
from rlxpy.ir.ops.base import ActKind
from rlxpy.ir.shape import normalize_axis
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, I32, U32, kernel, params
from rlxpy.wgpu_backend.lowering import (
    backward_attention,  # noqa: F401  (registers AttentionBackward)
    backward_pool,  # noqa: F401  (registers PoolBackward)
    backward_scan,  # noqa: F401  (registers SelectiveScanBackward)
    backward_scan_delta,  # noqa: F401  (registers GatedDeltaNetBackward)
)
from rlxpy.wgpu_backend.lowering.elementwise import ACTIVATION_WGSL
from rlxpy.wgpu_backend.lowering.loss import row_passes, target_type
from rlxpy.wgpu_backend.lowering.reduce import chunks, split_axes, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

F32_ONLY = accepts(rest=DType.F32, out=DType.F32)
BACKWARD_NORM_ROWS = kernel("backward_norm_rows", params(
    "BackwardNormRowsParams", ("rows",), rows=U32, cols=U32, x=U32, gamma=U32, dy=U32, dx=U32, center=U32,
    eps=F32), dtypes=F32_ONLY, shared_bytes=lambda s: 8 * int(s["WG"]), extent_axis=0)
BACKWARD_NORM_STATS = kernel("backward_norm_stats", params(
    "BackwardNormStatsParams", rows=U32, cols=U32, x=U32, stats=U32, center=U32, eps=F32), dtypes=F32_ONLY,
    shared_bytes=lambda s: 8 * int(s["WG"]))
BACKWARD_NORM_COLUMNS = kernel("backward_norm_columns", params(
    "BackwardNormColumnsParams", rows=U32, cols=U32, chunk_rows=U32, chunks=U32, phase=U32, gamma=U32, x=U32,
    dy=U32, stats=U32, partial=U32, y=U32), dtypes=F32_ONLY, workgroup=(64, 4, 1), shared_bytes=256 * 4)
BACKWARD_ROPE = kernel("backward_rope", params(
    "BackwardRopeParams", n=U32, seq=U32, width=U32, head_dim=U32, n_rot=U32, dy=U32, cos=U32, sin=U32,
    dx=U32, max_pos=U32, offset=I32, pos_input=U32, has_pos=U32),
    dtypes=accepts(DType.F32, DType.F32, DType.F32, (DType.I32, DType.U32), out=DType.F32))
BACKWARD_CUMSUM = kernel("backward_cumsum", params(
    "BackwardCumsumParams", lines=U32, axis_dim=U32, inner=U32, start=U32, count=U32, dy=U32, dx=U32,
    exclusive=U32), dtypes=accepts(DType.F32, out=DType.F32))
_INDEX_TYPES = {DType.I32: "i32", DType.U32: "u32", DType.F32: "f32", DType.I64: "i64"}
BACKWARD_GATHER = kernel("backward_gather", params(
    "BackwardGatherParams", outer=U32, dim=U32, inner=U32, blocks=U32, count_all=U32, start=U32, count=U32,
    accumulate=U32, dy=U32, idx=U32, y=U32), dtypes=accepts(DType.F32, tuple(_INDEX_TYPES), out=DType.F32),
    shared_bytes=lambda s: int(s["WG"]) // 2, sizes={"WG": 64})  # the chunk's match bits: 4 WG indices
BACKWARD_ACTIVATION = kernel("backward_activation", params(
    "BackwardActivationParams", ("n",), n=U32, t=U32, dy=U32, dx=U32),
    dtypes=accepts(DType.F32, DType.F32, out=DType.F32), extent_axis=0)
#: fn'(.) in WGSL, of the input ``v`` or of the output ``y`` (FROM_OUTPUT kinds)
ACTIVATION_SLOPES = {
    ActKind.RELU: "select(1.0, 0.0, y <= 0.0 && !is_nan(y))",
    ActKind.SIGMOID: "y * (1.0 - y)",
    ActKind.TANH: "1.0 - y * y",
    ActKind.EXP: "y",
    ActKind.LOG: "1.0 / v",
    ActKind.SQRT: "0.5 / y",
    ActKind.RSQRT: "-0.5 * y * y * y",
    ActKind.NEG: "-1.0",
    ActKind.ABS: "sign(v)",
    ActKind.GELU: "0.5 * (1.0 + erf_f32(v * 0.7071067811865475)) + v * exp(-0.5 * v * v) * 0.398942280401",
    ActKind.GELU_APPROX: "gelu_tanh_slope(v)",
    ActKind.SILU: "silu_slope(v)",
    ActKind.ROUND: "0.0",
    ActKind.SIN: "cos_f32(v)",
    ActKind.COS: "-sin_f32(v)",
    ActKind.TAN: "1.0 + y * y",
    ActKind.ATAN: "1.0 / (1.0 + v * v)",
    ActKind.HARDSIGMOID: "select(0.0, 1.0 / 6.0, v > -3.0 && v < 3.0)",
    ActKind.HARDSWISH: "select(select(1.0, v / 3.0 + 0.5, v <= 3.0), 0.0, v < -3.0)",
}
BACKWARD_CROSS_ENTROPY = kernel("backward_cross_entropy", params(
    "BackwardCrossEntropyParams", ("rows",), rows=U32, cols=U32, x=U32, targets=U32, dy=U32, y=U32),
    dtypes=accepts(DType.F32, (DType.I32, DType.U32, DType.I64), DType.F32, out=DType.F32),
    shared_bytes=lambda s: 8 * int(s["WG"]), extent_axis=0)

#: Rows per partial column sum of the norm parameter gradients (one workgroup each per column block).
CHUNK_ROWS = 128
COLUMN_BLOCK = 64
GATHER_LANES = 64


def _rows_cols(x: Node) -> tuple[int, int]:
    cols = x.shape[-1]
    return (x.numel // cols if cols else 0), cols


@lowers(ops.RmsNormBackwardInput, ops.LayerNormBackwardInput)
def lower_norm_backward_input(node: Node, ctx: LowerCtx) -> list[Step]:
    """dx of RmsNorm / LayerNorm: inputs x, gamma, [beta], dy (beta does not matter)."""
    x, gamma = ctx.inputs(node)[:2]
    dy = ctx.inputs(node)[-1]
    rows, cols = _rows_cols(x)
    if rows == 0 or cols == 0:
        return []
    lanes = row_passes(node, cols, 3, type(node.op).__name__)
    return [ctx.dispatch(BACKWARD_NORM_ROWS, node, ctx.grid_rows(rows), {"WG": lanes}, rows=rows, cols=cols,
                         x=ctx.offset(x), gamma=ctx.offset(gamma), dy=ctx.offset(dy), dx=ctx.offset(node),
                         center=int(isinstance(node.op, ops.LayerNormBackwardInput)), eps=node.op.eps)]


def _norm_columns_scratch(node: Node, graph: Graph) -> int:
    """Bytes of scratch the parameter gradient of ``node`` uses: row statistics, partial column sums."""
    x = graph.nodes[node.inputs[0]]
    rows, cols = _rows_cols(x)
    stats = 0 if isinstance(node.op, ops.RmsNormBackwardBeta) else 2 * rows
    return 4 * (stats + math.ceil(rows / CHUNK_ROWS) * cols)


def scratch_in_window(ctx: LowerCtx, nbytes: int) -> int | None:
    """Element offset (in the window) of ``nbytes`` of scratch, or None when the scratch area is smaller
    or lies outside this step's binding."""
    base, size = ctx.scratch
    if size < nbytes or base < ctx.window_base or base + nbytes > ctx.window_base + ctx.window_size:
        return None
    return (base - ctx.window_base) // 4


@lowers(ops.RmsNormBackwardGamma, ops.RmsNormBackwardBeta, ops.LayerNormBackwardGamma,
        scratch=_norm_columns_scratch)
def lower_norm_backward_params(node: Node, ctx: LowerCtx) -> list[Step]:
    """d gamma (sum over rows of dy * xhat) or d beta (sum over rows of dy)."""
    x, dy = ctx.inputs(node)[0], ctx.inputs(node)[-1]
    rows, cols = _rows_cols(x)
    if cols == 0:
        return []
    need_stats = not isinstance(node.op, ops.RmsNormBackwardBeta)
    scratch = scratch_in_window(ctx, _norm_columns_scratch(node, ctx.graph)) if rows else 0
    if scratch is None:
        return host_steps(node, ctx)
    blocks = math.ceil(cols / COLUMN_BLOCK)
    chunk_count = max(1, math.ceil(rows / CHUNK_ROWS))
    stats = scratch
    partial = scratch + (2 * rows if need_stats else 0)
    steps = []
    if need_stats and rows:
        lanes = row_passes(node, cols, 2, type(node.op).__name__)
        center = int(isinstance(node.op, ops.LayerNormBackwardGamma))
        steps.append(ctx.dispatch(BACKWARD_NORM_STATS, node, ctx.grid_rows(rows), {"WG": lanes},
                                  scalable=False, rows=rows, cols=cols, x=ctx.offset(x), stats=stats,
                                  center=center, eps=node.op.eps))
    fields = dict(rows=rows, cols=cols, chunk_rows=CHUNK_ROWS, chunks=chunk_count, gamma=int(need_stats),
                  x=ctx.offset(x), dy=ctx.offset(dy), stats=stats, partial=partial, y=ctx.offset(node))
    steps.append(ctx.dispatch(BACKWARD_NORM_COLUMNS, node, (blocks, chunk_count, 1), scalable=False,
                              phase=0, **fields))
    if chunk_count > 1:
        steps.append(ctx.dispatch(BACKWARD_NORM_COLUMNS, node, (blocks, 1, 1), scalable=False, phase=1,
                                  **fields))
    return steps


@lowers(ops.RopeBackward)
def lower_rope_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.RopeBackward = node.op  # type: ignore[assignment]
    dy, cos, sin = ctx.inputs(node)[:3]
    position = ctx.inputs(node)[3] if len(node.inputs) > 3 else None
    seq, width = dy.shape[-2], dy.shape[-1]
    max_pos = cos.shape[0]
    if op.position_offset < 0 or op.position_offset + seq > max_pos:
        raise GraphError(f"{where(node)}: positions {op.position_offset}..{op.position_offset + seq - 1} "
                         f"exceed the cos/sin tables {cos.type} (max_pos {max_pos})")
    if node.numel == 0:
        return []
    rot = op.n_rot or op.head_dim
    return [ctx.dispatch(BACKWARD_ROPE, node, ctx.grid_1d(node.numel),
                         {"INTERLEAVED": "true" if op.interleaved else "false"},
                         n=node.numel, seq=seq, width=width, head_dim=op.head_dim, n_rot=rot,
                         dy=ctx.offset(dy), cos=ctx.offset(cos), sin=ctx.offset(sin), dx=ctx.offset(node),
                         max_pos=max_pos, offset=op.position_offset,
                         pos_input=ctx.offset(position) if position is not None else 0,
                         has_pos=int(position is not None))]


@lowers(ops.CumsumBackward)
def lower_cumsum_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    """The suffix scan; chunks run last first, each continuing from the chunk after it."""
    (dy,) = ctx.inputs(node)
    axis = normalize_axis(node.op.axis, dy.rank)
    outer, axis_dim, inner = split_axes(dy.shape, axis, axis)
    if node.numel == 0:
        return []
    lines = outer * inner
    pieces = chunks(axis_dim, steps_per_dispatch(node, 1, 16, "CumsumBackward"))
    return [ctx.dispatch(BACKWARD_CUMSUM, node, ctx.grid_1d(lines), None, axis > 0, lines=lines,
                         axis_dim=axis_dim, inner=inner, start=start, count=count, dy=ctx.offset(dy),
                         dx=ctx.offset(node), exclusive=int(node.op.exclusive))
            for start, count in reversed(pieces)]


@lowers(ops.GatherBackward)
def lower_gather_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    dy, idx = ctx.inputs(node)
    op: ops.GatherBackward = node.op  # type: ignore[assignment]
    axis = normalize_axis(op.axis, node.rank)
    outer, dim, inner = split_axes(node.shape, axis, axis)
    if node.numel == 0:
        return []
    if idx.dtype not in _INDEX_TYPES:
        raise GraphError(f"{where(node)}: indices of dtype {idx.dtype} are not lowered (i32/u32/f32/i64)")
    blocks = math.ceil(inner / GATHER_LANES)
    grid = ctx.grid_1d(outer * dim * blocks, 1)
    subs = {"WG": GATHER_LANES, "INDEX": _INDEX_TYPES[idx.dtype]}
    count_all = idx.numel
    pieces = chunks(count_all, steps_per_dispatch(node, 1, 16, "GatherBackward"))
    return [ctx.dispatch(BACKWARD_GATHER, node, grid, subs, scalable=False, outer=outer, dim=dim,
                         inner=inner, blocks=blocks, count_all=count_all, start=start, count=count,
                         accumulate=int(start > 0), dy=ctx.offset(dy), idx=ctx.offset(idx),
                         y=ctx.offset(node))
            for start, count in pieces]


@lowers(ops.CrossEntropyBackward)
def lower_cross_entropy_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    logits, targets, dy = ctx.inputs(node)
    cols = logits.shape[-1]
    rows = dy.numel
    if rows == 0 or cols == 0:
        return []
    lanes = row_passes(node, cols, 2, "CrossEntropyBackward")
    subs = {"WG": lanes, "TARGET": target_type(node, targets)}
    return [ctx.dispatch(BACKWARD_CROSS_ENTROPY, node, ctx.grid_rows(rows), subs, node.rank > 1, rows=rows,
                         cols=cols, x=ctx.offset(logits), targets=ctx.offset(targets), dy=ctx.offset(dy),
                         y=ctx.offset(node))]



@lowers(ops.ActivationBackward)
def lower_activation_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    """dy * fn'(t) in one pass; t is the output y for ``of_output``, else the input (y recomputed from it
    for the kinds whose slope is written in y)."""
    op: ops.ActivationBackward = node.op  # type: ignore[assignment]
    t, dy = ctx.inputs(node)
    if node.numel == 0:
        return []
    forward = "v" if op.of_output or op.fn not in FROM_OUTPUT else ACTIVATION_WGSL[op.fn]
    subs = {"FORWARD": forward, "SLOPE": ACTIVATION_SLOPES[op.fn],
            "ZERO": "true" if op.fn is ActKind.ROUND else "false"}
    return [ctx.dispatch(BACKWARD_ACTIVATION, node, ctx.grid_1d(node.numel), subs, n=node.numel,
                         t=ctx.offset(t), dy=ctx.offset(dy), dx=ctx.offset(node))]

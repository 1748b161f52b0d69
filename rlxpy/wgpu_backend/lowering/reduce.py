"""Reduce family: Reduce (sum/mean/max/min/prod), Cumsum, Argmax and TopK on f32.

Every op sees its input as ``[outer, n, inner]`` around the reduced/scanned axes (contiguous axes
merge into one ``n``). Kernel choice:

* Reduce: ``n <= 64`` -> one thread per output (reduce_serial); ``inner == 1`` -> one workgroup
  per row with a tree (reduce_tree); otherwise a 16x16 workgroup per 16 adjacent outputs, reading
  coalesced along ``inner`` (reduce_tile).
* Cumsum: long contiguous rows -> one workgroup per row (reduce_cumsum_rows), else one thread per line.
* Argmax / TopK (last axis): one workgroup per row picking k times (reduce_topk); for large k,
  where k passes over the row would cost more than ranking every element, reduce_rank; k = 1 over
  long rows: parts of a row side by side, then a merge (reduce_topk_split, lowering/reduce_topk.py).

Loop budget: lavapipe (llvmpipe) silently stops a shader invocation after 65535 loop iterations
in total, over all its loops (LP_MAX_TGSI_LOOP_ITERATIONS; measured: a 70000-step loop writes
65535 values, then nothing). Work that could run past ``LOOP_BUDGET`` iterations per invocation
is split into several dispatches of the same kernel over consecutive chunks, each resuming from
what the previous one wrote (also ScatterAdd, the generic quantised GEMV); where no split exists the
lowering raises LimitError, or, on a CPU adapter whichever kernel variant is forced
(``DeviceFacts.loop_limited``), picks a kernel whose walk stays within the budget (attention).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlxpy.errors import LimitError, UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import ReduceOp
from rlxpy.ir.shape import normalize_axis
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.lowering import reduce_topk
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

F32_IN = accepts(DType.F32, out=DType.F32)  # Reduce, Cumsum: f32 in and out
INDICES = accepts(DType.F32, out=DType.I32)  # Argmax, TopK: f32 values, i32 indices


def _lanes_bytes(per_lane: int):
    """Workgroup memory of a kernel with ``per_lane`` bytes per lane of its ``{{WG}}`` lanes."""
    return lambda subs: per_lane * int(subs["WG"])


REDUCE_SERIAL = kernel("reduce_serial", params(
    "ReduceSerialParams", ("outputs",), outputs=U32, reduce_dim=U32, inner=U32, x=U32, y=U32, divisor=F32),
    dtypes=F32_IN, extent_axis=0)
REDUCE_TREE = kernel("reduce_tree", params(
    "ReduceTreeParams", ("rows",), rows=U32, reduce_dim=U32, start=U32, count=U32, accumulate=U32, x=U32,
    y=U32, divisor=F32), dtypes=F32_IN, shared_bytes=_lanes_bytes(4), extent_axis=0)
REDUCE_TILE = kernel("reduce_tile", params(
    "ReduceTileParams", ("groups",), groups=U32, tiles=U32, reduce_dim=U32, inner=U32, start=U32, count=U32,
    accumulate=U32, x=U32, y=U32, divisor=F32), dtypes=F32_IN, workgroup=(16, 16, 1), shared_bytes=256 * 4,
    extent_axis=0)
REDUCE_CUMSUM_LINES = kernel("reduce_cumsum_lines", params(
    "ReduceCumsumLinesParams", ("lines",), lines=U32, axis_dim=U32, inner=U32, start=U32, count=U32, x=U32,
    y=U32, exclusive=U32), dtypes=F32_IN, extent_axis=0)
REDUCE_CUMSUM_ROWS = kernel("reduce_cumsum_rows", params(
    "ReduceCumsumRowsParams", ("rows",), rows=U32, cols=U32, start=U32, count=U32, x=U32, y=U32,
    exclusive=U32), dtypes=F32_IN, shared_bytes=_lanes_bytes(4), extent_axis=0)
REDUCE_TOPK = kernel("reduce_topk", params(
    "ReduceTopkParams", ("rows",), rows=U32, cols=U32, k=U32, round_start=U32, round_count=U32, x=U32,
    y=U32), dtypes=INDICES, shared_bytes=_lanes_bytes(8), extent_axis=0)
REDUCE_RANK = kernel("reduce_rank", params(
    "ReduceRankParams", ("groups",), groups=U32, tiles=U32, cols=U32, k=U32, x=U32, y=U32),
    dtypes=INDICES, shared_bytes=_lanes_bytes(4), extent_axis=0)

#: Reductions up to this length run one thread per output (the catalogue's split).
SERIAL_MAX = 64
#: Scans longer than this (on contiguous rows) use one workgroup per row.
SCAN_ROW_MIN = 64
TILE_COLS = 16
#: TopK picks by k passes up to this k; above it ranking costs cols^2 instead of k * cols.
SELECT_PASSES_MAX_K = 64
#: Rows this long always use k passes: ranking would cost cols^2 per row (and cols loop steps).
RANK_MAX_COLS = 16384
#: Row kernels run 64 lanes on rows up to this length, else 256 (an idle lane still costs barriers).
SMALL_ROW_MAX = 1024
#: Loop iterations one invocation may run (half of llvmpipe's 65535, for the fixed tree loops).
LOOP_BUDGET = 32768

#: op -> (identity, combine(a, b)) in WGSL; max/min propagate NaN like torch.amax/amin.
_REDUCE_WGSL = {
    ReduceOp.SUM: ("0.0", "a + b"),
    ReduceOp.MEAN: ("0.0", "a + b"),
    ReduceOp.MAX: ("-inf_f32()", "maxp(a, b)"),
    ReduceOp.MIN: ("inf_f32()", "minp(a, b)"),
    ReduceOp.PROD: ("1.0", "a * b"),
}


def row_lanes(cols: int) -> int:
    """Lanes (``{{WG}}``) of one-workgroup-per-row kernels; the tree loops need a power of two."""
    return 64 if cols <= SMALL_ROW_MAX else 256


def split_axes(shape: Sequence[int], first: int, last: int) -> tuple[int, int, int]:
    """(outer, n, inner) of ``shape`` around the contiguous axes ``first..last`` (inclusive)."""
    return math.prod(shape[:first]), math.prod(shape[first:last + 1]), math.prod(shape[last + 1:])


def chunks(total: int, size: int) -> list[tuple[int, int]]:
    """(start, count) pieces of ``range(total)`` of at most ``size`` (one piece when total is 0)."""
    size = max(1, size)
    return [(start, min(size, total - start)) for start in range(0, total, size)] or [(0, 0)]


def steps_per_dispatch(node: Node, per_step: int, overhead: int, what: str) -> int:
    """How many units of ``per_step`` loop iterations one dispatch may run within LOOP_BUDGET."""
    fitting = (LOOP_BUDGET - overhead) // max(1, per_step)
    if fitting < 1:
        raise LimitError(f"{where(node)}: {what} would run {per_step + overhead} loop iterations in one GPU "
                         f"thread, more than the {LOOP_BUDGET} allowed (lavapipe silently stops at 65535)")
    return fitting


@lowers(ops.Reduce)
def lower_reduce(node: Node, ctx: LowerCtx) -> list[Step]:
    """``y[o, i] = op_r x[o, r, i]`` like torch.sum/mean/amax/amin/prod (NaN propagates in max/min)."""
    (x,) = ctx.inputs(node)
    op: ops.Reduce = node.op
    axes = sorted({normalize_axis(a, x.rank) for a in op.axes})
    outer, reduce_dim, inner = split_axes(x.shape, axes[0], axes[-1])
    if reduce_dim == 0 and op.op in (ReduceOp.MAX, ReduceOp.MIN):
        raise UnsupportedOpError(f"{where(node)}: {op.op.name.lower()} over an empty axis has no identity "
                                 f"(input {x.type})")
    if node.numel == 0:
        return []
    identity, combine = _REDUCE_WGSL[op.op]
    subs = {"IDENTITY": identity, "COMBINE": combine}
    # the active extent (first rows only) scales the outputs only when the leading axis is kept
    scalable = axes[0] > 0
    # mean divides the sum by n at the end, like torch.mean (0 / 0 = NaN for an empty axis)
    divisor = float(reduce_dim) if op.op is ReduceOp.MEAN else 1.0
    if reduce_dim <= SERIAL_MAX:
        outputs = outer * inner
        return [ctx.dispatch(REDUCE_SERIAL, node, ctx.grid_1d(outputs), subs, scalable, outputs=outputs,
                             reduce_dim=reduce_dim, inner=inner, x=ctx.offset(x), y=ctx.offset(node),
                             divisor=divisor)]
    if inner == 1:
        lanes = row_lanes(reduce_dim)
        reduce_kernel, grid, shape_fields = REDUCE_TREE, ctx.grid_rows(outer), {"rows": outer}
        subs["WG"] = lanes
    else:
        lanes, tiles = TILE_COLS, math.ceil(inner / TILE_COLS)
        reduce_kernel, grid = REDUCE_TILE, ctx.grid_rows(outer * tiles)
        shape_fields = {"groups": outer * tiles, "tiles": tiles, "inner": inner}
    # each lane folds count / lanes values per dispatch; long reductions continue in later dispatches
    pieces = chunks(reduce_dim, lanes * steps_per_dispatch(node, 1, 64, "Reduce"))
    return [ctx.dispatch(reduce_kernel, node, grid, subs, scalable, reduce_dim=reduce_dim, start=start,
                         count=count, accumulate=int(start > 0), x=ctx.offset(x), y=ctx.offset(node),
                         divisor=divisor if start + count == reduce_dim else 1.0, **shape_fields)
            for start, count in pieces]


@lowers(ops.Cumsum)
def lower_cumsum(node: Node, ctx: LowerCtx) -> list[Step]:
    """Prefix sums along any axis, like torch.cumsum; exclusive shifts by one (y[0] = 0)."""
    (x,) = ctx.inputs(node)
    axis = normalize_axis(node.op.axis, x.rank)
    outer, axis_dim, inner = split_axes(x.shape, axis, axis)
    if node.numel == 0:
        return []
    fields = {"x": ctx.offset(x), "y": ctx.offset(node), "exclusive": int(node.op.exclusive)}
    scalable = axis > 0  # a scan down the leading axis runs in full (its first rows are still right)
    if inner == 1 and axis_dim > SCAN_ROW_MIN:
        lanes = row_lanes(axis_dim)
        # per block of `lanes` values: 1 + log2(lanes) loop steps (the Hillis-Steele scan)
        blocks = steps_per_dispatch(node, 1 + int(math.log2(lanes)), 16, "Cumsum")
        subs = {"WG": lanes}
        return [ctx.dispatch(REDUCE_CUMSUM_ROWS, node, ctx.grid_rows(outer), subs, scalable, rows=outer,
                             cols=axis_dim, start=start, count=count, **fields)
                for start, count in chunks(axis_dim, blocks * lanes)]
    lines = outer * inner
    return [ctx.dispatch(REDUCE_CUMSUM_LINES, node, ctx.grid_1d(lines), None, scalable,
                         lines=lines, axis_dim=axis_dim, inner=inner, start=start, count=count, **fields)
            for start, count in chunks(axis_dim, steps_per_dispatch(node, 1, 16, "Cumsum"))]


def _select(node: Node, ctx: LowerCtx, x: Node, k: int, what: str) -> list[Step]:
    """Indices of the k best per last-axis row into ``node`` (i32 [rows, k])."""
    cols = x.shape[-1]
    if cols == 0:
        raise UnsupportedOpError(f"{where(node)}: {what} of an empty last axis has no answer ({x.type})")
    rows = x.numel // cols
    if rows == 0:
        return []
    split = reduce_topk.split_steps(node, ctx, x, rows, cols)  # k = 1 over long rows: two dispatches
    if split is not None:
        return split
    fields = {"cols": cols, "k": k, "x": ctx.offset(x), "y": ctx.offset(node)}
    if k <= SELECT_PASSES_MAX_K or cols > RANK_MAX_COLS:
        lanes = row_lanes(cols)
        # one round: a strided scan of cols / lanes values plus the log2(lanes) tree steps
        per_round = math.ceil(cols / lanes) + int(math.log2(lanes)) + 1
        rounds = steps_per_dispatch(node, per_round, 16, what)
        subs = {"WG": lanes}
        return [ctx.dispatch(REDUCE_TOPK, node, ctx.grid_rows(rows), subs, rows=rows, round_start=start,
                             round_count=count, **fields)
                for start, count in chunks(k, rounds)]
    tiles = math.ceil(cols / REDUCE_RANK.workgroup[0])
    return [ctx.dispatch(REDUCE_RANK, node, ctx.grid_rows(rows * tiles),
                         groups=rows * tiles, tiles=tiles, **fields)]


@lowers(ops.Argmax, scratch=reduce_topk.scratch_bytes)
def lower_argmax(node: Node, ctx: LowerCtx) -> list[Step]:
    """First index of the row maximum, NaN counting as the maximum (torch.argmax)."""
    (x,) = ctx.inputs(node)
    return _select(node, ctx, x, 1, "Argmax")


@lowers(ops.TopK, scratch=reduce_topk.scratch_bytes)
def lower_topk(node: Node, ctx: LowerCtx) -> list[Step]:
    """Indices of the k largest, descending, NaN largest, ties -> smaller index (stable torch.topk)."""
    (x,) = ctx.inputs(node)
    return _select(node, ctx, x, node.op.k, "TopK")

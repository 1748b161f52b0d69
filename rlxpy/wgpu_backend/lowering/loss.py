"""Loss family: LogSoftmax (any axis) and per-row CrossEntropy, both one loss_rows dispatch: one
workgroup per line along the class axis, an online (max, sum) pass merged over the lanes, then the
write pass (x - lse for LogSoftmax, lse - x[target] for CrossEntropy). TargetCount: one workgroup
(loss_count) counting the targets in range.
"""

from __future__ import annotations

import math

from rlxpy.errors import UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.shape import normalize_axis
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import row_lanes, split_axes, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

#: The targets' dtypes as the ``target_<dtype>`` readers of include/loss_targets.wgsl name them.
TARGET_TYPES = {DType.I32: "i32", DType.U32: "u32", DType.I64: "i64"}
LOG_SOFTMAX, CROSS_ENTROPY = 0, 1  # loss_rows' MODE

LOSS_ROWS = kernel("loss_rows", params(
    "LossRowsParams", ("rows",), rows=U32, cols=U32, inner=U32, x=U32, targets=U32, y=U32),
    dtypes=accepts(DType.F32, tuple(TARGET_TYPES), out=DType.F32),
    shared_bytes=lambda s: 8 * int(s["WG"]), extent_axis=0)
LOSS_COUNT = kernel("loss_count", params("LossCountParams", rows=U32, cols=U32, targets=U32, y=U32),
                    dtypes=accepts(tuple(TARGET_TYPES), out=DType.F32),
                    shared_bytes=lambda s: 4 * int(s["WG"]))
COUNT_LANES = 256


def target_type(node: Node, targets: Node) -> str:
    """The ``{{TARGET}}`` reader of a targets tensor (the op's shape rule already allows only these)."""
    if targets.dtype not in TARGET_TYPES:
        raise UnsupportedOpError(f"{where(node)}: targets of dtype {targets.dtype} are not lowered "
                                 "(i32/u32/i64)")
    return TARGET_TYPES[targets.dtype]


def row_passes(node: Node, cols: int, passes: int, what: str) -> int:
    """The lanes of a one-workgroup-per-row kernel reading each row ``passes`` times, checked against
    the loop budget."""
    lanes = row_lanes(cols)
    steps_per_dispatch(node, passes * math.ceil(cols / lanes), 32, what)
    return lanes


@lowers(ops.LogSoftmax)
def lower_log_softmax(node: Node, ctx: LowerCtx) -> list[Step]:
    (x,) = ctx.inputs(node)
    axis = normalize_axis(node.op.axis, x.rank)
    outer, cols, inner = split_axes(x.shape, axis, axis)
    if node.numel == 0:
        return []
    lanes = row_passes(node, cols, 2, "LogSoftmax")
    lines = outer * inner
    # the active extent may cut the leading axis only when it is not the class axis
    subs = {"WG": lanes, "MODE": LOG_SOFTMAX, "TARGET": "i32"}
    return [ctx.dispatch(LOSS_ROWS, node, ctx.grid_rows(lines), subs, axis > 0 and inner == 1, rows=lines,
                         cols=cols, inner=inner, x=ctx.offset(x), targets=0, y=ctx.offset(node))]


@lowers(ops.CrossEntropy)
def lower_cross_entropy(node: Node, ctx: LowerCtx) -> list[Step]:
    logits, targets = ctx.inputs(node)
    cols = logits.shape[-1]
    rows = node.numel
    if rows == 0:
        return []
    lanes = row_passes(node, cols, 1, "CrossEntropy")
    subs = {"WG": lanes, "MODE": CROSS_ENTROPY, "TARGET": target_type(node, targets)}
    return [ctx.dispatch(LOSS_ROWS, node, ctx.grid_rows(rows), subs, node.rank > 0, rows=rows, cols=cols,
                         inner=1, x=ctx.offset(logits), targets=ctx.offset(targets), y=ctx.offset(node))]


@lowers(ops.TargetCount)
def lower_target_count(node: Node, ctx: LowerCtx) -> list[Step]:
    (targets,) = ctx.inputs(node)
    steps_per_dispatch(node, math.ceil(targets.numel / COUNT_LANES), 16, "TargetCount")
    subs = {"WG": COUNT_LANES, "TARGET": target_type(node, targets)}
    return [ctx.dispatch(LOSS_COUNT, node, (1, 1, 1), subs, scalable=False, rows=targets.numel,
                         cols=node.op.classes, targets=ctx.offset(targets), y=ctx.offset(node))]

"""Pool and AdaptivePool kernels: conv_pool (one invocation per output) for small windows,
conv_pool_rows (one workgroup per output, a tree over its lanes) for large ones such as global
pooling, where one invocation would walk thousands of taps alone.

Both fold only the taps inside the input (a tap in the padding, or past it with ceil_mode, is the
identity); a mean divides by the IR's divisor (override, or the taps inside the padded input or the
input), computed per output from the window's bounds. A windowed (not adaptive) pool walks its whole
window from the corner and tests each tap, one index decode per output: ResNet-18's 3x3 / 2 max pool
at batch 32 went 0.175 -> 0.127 ms on an H100 (torch CUDA 0.118) against the per-axis ranges, whose
bounds take integer divisions.
"""

from __future__ import annotations

import math

from rlxpy.errors import LimitError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import ReduceOp
from rlxpy.ir.ops.conv import Geometry
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import kernel
from rlxpy.wgpu_backend.lowering.conv_geometry import POOL_PARAMS, as_3d, window_fields
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET, row_lanes
from rlxpy.wgpu_backend.schedule import LowerCtx, Step

F32_IN = accepts(DType.F32, out=DType.F32)
CONV_POOL = kernel("conv_pool", POOL_PARAMS, dtypes=F32_IN)
CONV_POOL_ROWS = kernel("conv_pool_rows", POOL_PARAMS, dtypes=F32_IN, shared_bytes=lambda s: 4 * int(s["WG"]))
#: Windows of more taps than this run one workgroup per output.
ROWS_MIN_TAPS = 512

#: (identity, combine(a, b)) per pool kind; max/min propagate NaN (include/common_float.wgsl).
POOL_WGSL = {
    ReduceOp.SUM: ("0.0", "a + b"),
    ReduceOp.MEAN: ("0.0", "a + b"),
    ReduceOp.MAX: ("-inf_f32()", "maxp(a, b)"),
    ReduceOp.MIN: ("inf_f32()", "minp(a, b)"),
    ReduceOp.PROD: ("1.0", "a * b"),
}


def _adaptive_geometry(in_sizes, out_sizes) -> tuple[Geometry, int]:
    """A placeholder window for AdaptivePool (the kernel computes its bins) and its largest bin."""
    ones = (1,) * len(in_sizes)
    biggest = math.prod(math.ceil(i / o) + 1 for i, o in zip(in_sizes, out_sizes))
    return Geometry(ones, ones, (0,) * len(ones), (0,) * len(ones), ones), biggest


def pool_steps(node: Node, ctx: LowerCtx) -> list[Step]:
    (x,) = ctx.inputs(node)
    op = node.op
    in_sizes, out_sizes = tuple(x.shape[2:]), tuple(node.shape[2:])
    if node.numel == 0:
        return []
    adaptive = isinstance(op, ops.AdaptivePool)
    if adaptive:
        geo, taps = _adaptive_geometry(in_sizes, out_sizes)
        lo, hi, divisor = (0,) * len(in_sizes), in_sizes, 0.0
    else:
        geo = op.geometry(len(in_sizes))
        taps = math.prod(geo.kernel)
        if op.count_include_pad:
            lo = tuple(-b for b in geo.begin)
            hi = tuple(n + e for n, e in zip(in_sizes, geo.end))
        else:
            lo, hi = (0,) * len(in_sizes), in_sizes
        divisor = float(op.divisor)
    identity, combine = POOL_WGSL[op.kind]
    subs: dict[str, object] = {"IDENTITY": identity, "COMBINE": combine}
    positions = math.prod(out_sizes)
    fields = dict(total=node.numel, positions=positions, **window_fields(in_sizes, out_sizes, geo),
                  **{f"lo_{a}": v for a, v in zip("dhw", as_3d(lo, 0))},
                  **{f"hi_{a}": v for a, v in zip("dhw", as_3d(hi, 1))},
                  adaptive=int(adaptive), mean=int(op.kind is ReduceOp.MEAN), divisor=divisor,
                  x=ctx.offset(x), y=ctx.offset(node))
    if taps <= ROWS_MIN_TAPS and 2 * taps <= LOOP_BUDGET:
        return [ctx.dispatch(CONV_POOL, node, ctx.grid_1d(node.numel), subs, False, **fields)]
    lanes = row_lanes(taps)
    if math.ceil(taps / lanes) > LOOP_BUDGET:
        raise LimitError(f"{where(node)}: a window of {taps} taps runs {math.ceil(taps / lanes)} loop "
                         f"iterations per GPU thread, more than the {LOOP_BUDGET} allowed (input {x.type})")
    return [ctx.dispatch(CONV_POOL_ROWS, node, ctx.grid_rows(node.numel), {**subs, "WG": lanes}, False,
                         **fields)]

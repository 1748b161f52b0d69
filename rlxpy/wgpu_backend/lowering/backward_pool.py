"""PoolBackward on f32: backward_pool, one invocation per input element summing the shares of the
windows (bins) that hold it, with the forward pool's own window and divisor code
(include/conv_pool_window.wgsl). A max/min window is rescanned only where the element equals its
output, to find the window's first such tap, so the work is about the candidate windows per element.
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
from rlxpy.wgpu_backend.kernels.params import F32, I32, U32, kernel, params
from rlxpy.wgpu_backend.lowering.conv_geometry import as_3d, window_fields
from rlxpy.wgpu_backend.lowering.conv_pool import POOL_WGSL
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

_AXES = ("d", "h", "w")
BACKWARD_POOL = kernel("backward_pool", params(
    "BackwardPoolParams", total=U32, positions=U32, in_positions=U32,
    **{f"{name}_{a}": kind for name, kind in (("in", U32), ("out", U32), ("k", U32), ("s", U32), ("p", I32),
                                               ("dl", U32)) for a in _AXES},
    **{f"{bound}_{a}": I32 for bound in ("lo", "hi") for a in _AXES}, adaptive=U32, mean=U32, extreme=U32,
    divisor=F32, x=U32, y=U32, dy=U32, dx=U32),
    dtypes=accepts(DType.F32, DType.F32, DType.F32, out=DType.F32))


@lowers(ops.PoolBackward)
def lower_pool_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    x, y, dy = ctx.inputs(node)
    op: ops.PoolBackward = node.op  # type: ignore[assignment]
    in_sizes, out_sizes = tuple(x.shape[2:]), tuple(y.shape[2:])
    if node.numel == 0:
        return []
    adaptive = bool(op.output_size)
    if adaptive:
        ones = (1,) * len(in_sizes)  # a placeholder window: the kernel computes the bins
        geo = Geometry(ones, ones, (0,) * len(ones), (0,) * len(ones), ones)
        taps = math.prod(-(-i // o) + 1 for i, o in zip(in_sizes, out_sizes))
        candidates = math.prod(-(-o // i) + 1 for i, o in zip(in_sizes, out_sizes))
        lo, hi = (0,) * len(in_sizes), in_sizes
    else:
        forward = op.forward()
        geo = forward.geometry(len(in_sizes))
        taps = candidates = math.prod(geo.kernel)
        if op.count_include_pad:
            lo = tuple(-b for b in geo.begin)
            hi = tuple(n + e for n, e in zip(in_sizes, geo.end))
        else:
            lo, hi = (0,) * len(in_sizes), in_sizes
    extreme = op.kind in (ReduceOp.MAX, ReduceOp.MIN)
    if candidates + (taps if extreme else 0) > LOOP_BUDGET:
        raise LimitError(f"{where(node)}: {candidates} candidate windows of {taps} taps per input element "
                         f"exceed the {LOOP_BUDGET} loop iterations one GPU thread may run (x {x.type})")
    fields = dict(total=node.numel, positions=math.prod(out_sizes), in_positions=math.prod(in_sizes),
                  **window_fields(in_sizes, out_sizes, geo),
                  **{f"lo_{a}": v for a, v in zip("dhw", as_3d(lo, 0))},
                  **{f"hi_{a}": v for a, v in zip("dhw", as_3d(hi, 1))},
                  adaptive=int(adaptive), mean=int(op.kind is ReduceOp.MEAN), extreme=int(extreme),
                  divisor=float(op.divisor), x=ctx.offset(x), y=ctx.offset(y), dy=ctx.offset(dy),
                  dx=ctx.offset(node))
    identity, combine = POOL_WGSL[op.kind]
    subs = {"IDENTITY": identity, "COMBINE": combine}
    return [ctx.dispatch(BACKWARD_POOL, node, ctx.grid_1d(node.numel), subs, False, **fields)]

"""Shape family, resampling: Resize (nearest and linear, 1 to 3 trailing dims) on f32.

One shape_resize invocation per output element; the resized dims are padded in front to three
(in = out = 1 dims the kernel does not sample) and everything before them is one outer index.
The f32 step of each dim (ops.Resize.step: in/out, the given steps, or ALIGN_CORNERS's ratio) is
computed here once, so kernel and reference start from the same number.
"""

from __future__ import annotations

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

SHAPE_RESIZE = kernel("shape_resize", params(
    "ShapeResizeParams", n=U32, x=U32, y=U32, first=U32, mode=U32, coord=U32,
    **{f"{kind}{d}": U32 for kind in ("in", "out") for d in range(3)}, **{f"step{d}": F32 for d in range(3)}),
    dtypes=accepts(DType.F32, out=DType.F32))


@lowers(ops.Resize)
def lower_resize(node: Node, ctx: LowerCtx) -> list[Step]:
    """torch's interpolate (nearest, nearest-exact, (bi/tri)linear) and ONNX's Resize."""
    op: ops.Resize = node.op  # type: ignore[assignment]
    (x,) = ctx.inputs(node)
    if node.numel == 0:
        return []
    count = len(op.sizes)
    sizes_in = [int(d) for d in x.shape[x.rank - count:]]
    pad = 3 - count
    ins = [1] * pad + sizes_in
    outs = [1] * pad + list(op.sizes)
    steps = [1.0] * pad + [op.step(d, sizes_in[d]) for d in range(count)]
    fields = {**{f"in{d}": ins[d] for d in range(3)}, **{f"out{d}": outs[d] for d in range(3)},
              **{f"step{d}": steps[d] for d in range(3)}}
    return [ctx.dispatch(SHAPE_RESIZE, node, ctx.grid_1d(node.numel), None, False, n=node.numel,
                         x=ctx.offset(x), y=ctx.offset(node), first=pad, mode=int(op.mode),
                         coord=int(op.coord), **fields)]

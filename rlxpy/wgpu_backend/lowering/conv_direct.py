"""The direct conv (conv_direct.wgsl: one invocation per output element, looping over the group's
input channels and window taps) and Im2Col (conv_im2col.wgsl: one invocation per patch element).

The direct kernel serves convs whose groups have few output channels (depthwise, channel
multipliers, a final projection to a few channels), where the implicit GEMM's 16-channel tile
would mostly idle; conv.py picks it.
"""

from __future__ import annotations

from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import kernel
from rlxpy.wgpu_backend.lowering.conv_geometry import CONV_PARAMS
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import LowerCtx, Step

CONV_DIRECT = kernel("conv_direct", CONV_PARAMS,
                     dtypes=accepts(DType.F32, DType.F32, DType.F32, out=DType.F32))  # x, w, bias
CONV_IM2COL = kernel("conv_im2col", CONV_PARAMS, dtypes=accepts(DType.F32, out=DType.F32))


def loop_iterations(fields: dict[str, int]) -> int:
    """Loop iterations one direct-conv invocation runs (each of its four nested loops counts)."""
    kd, kh, kw = fields["k_d"], fields["k_h"], fields["k_w"]
    return fields["c_in_g"] * (1 + kd + kd * kh + kd * kh * kw)


def fits_budget(fields: dict[str, int]) -> bool:
    return loop_iterations(fields) <= LOOP_BUDGET


def direct_steps(node: Node, ctx: LowerCtx, fields: dict[str, int], subs: dict[str, object]) -> list[Step]:
    return [ctx.dispatch(CONV_DIRECT, node, ctx.grid_1d(fields["total"]), subs, False, m_start=0, splits=1,
                         k_chunk=0, part=0, **fields)]


def im2col_steps(node: Node, ctx: LowerCtx, fields: dict[str, int]) -> list[Step]:
    return [ctx.dispatch(CONV_IM2COL, node, ctx.grid_1d(fields["total"]), {"MODE": "forward"}, False,
                         m_start=0, splits=1, k_chunk=0, part=0, **fields)]

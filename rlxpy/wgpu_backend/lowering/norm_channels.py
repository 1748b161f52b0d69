"""Norm family, the channel norms of CNNs on f32: GroupNorm (instance norm is GroupNorm with C groups)
and inference BatchNorm.

GroupNorm runs norm_groups: one workgroup per (sample, group) row, which NCHW stores contiguously
((C / groups) * spatial elements), a centred two-pass variance like norm_rows, gamma and beta read per
channel. BatchNorm runs norm_batch, one invocation per element (its statistics are given). Both spell
out 1 / sqrt(var + eps) for var + eps <= 0 (include/norm_inv_std.wgsl).
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import row_lanes, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

F32_ONLY = accepts(rest=DType.F32, out=DType.F32)
NORM_GROUPS = kernel("norm_groups", params(
    "NormGroupsParams", rows=U32, cols=U32, spatial=U32, groups=U32, group_channels=U32, x=U32, gamma=U32,
    beta=U32, y=U32, has_beta=U32, eps=F32), dtypes=F32_ONLY, shared_bytes=lambda s: 4 * int(s["WG"]))
NORM_BATCH = kernel("norm_batch", params(
    "NormBatchParams", n=U32, spatial=U32, channels=U32, x=U32, mean=U32, variance=U32, gamma=U32, beta=U32,
    y=U32, eps=F32), dtypes=F32_ONLY)


def _spatial(x: Node) -> int:
    return math.prod(int(d) for d in x.shape[2:])


@lowers(ops.GroupNorm)
def lower_group_norm(node: Node, ctx: LowerCtx) -> list[Step]:
    """torch.nn.functional.group_norm over (C / groups) channels x spatial per sample and group."""
    op: ops.GroupNorm = node.op  # type: ignore[assignment]
    x, gamma, *beta = ctx.inputs(node)
    if node.numel == 0:
        return []
    channels, spatial = int(x.shape[1]), _spatial(x)
    rows = int(x.shape[0]) * op.groups
    cols = channels // op.groups * spatial
    lanes = row_lanes(cols)
    steps_per_dispatch(node, 3 * math.ceil(cols / lanes), 32, "GroupNorm")
    return [ctx.dispatch(NORM_GROUPS, node, ctx.grid_rows(rows), {"WG": lanes}, False,
                         rows=rows, cols=cols, spatial=spatial, groups=op.groups,
                         group_channels=channels // op.groups, x=ctx.offset(x), gamma=ctx.offset(gamma),
                         beta=ctx.offset(beta[0]) if beta else 0, y=ctx.offset(node),
                         has_beta=int(bool(beta)), eps=op.eps)]


@lowers(ops.BatchNorm)
def lower_batch_norm(node: Node, ctx: LowerCtx) -> list[Step]:
    """torch.nn.functional.batch_norm(training=False): per-channel statistics, one pass."""
    x, mean, var, gamma, beta = ctx.inputs(node)
    if node.numel == 0:
        return []
    return [ctx.dispatch(NORM_BATCH, node, ctx.grid_1d(node.numel), None, False, n=node.numel,
                         spatial=_spatial(x), channels=int(x.shape[1]), x=ctx.offset(x),
                         mean=ctx.offset(mean), variance=ctx.offset(var), gamma=ctx.offset(gamma),
                         beta=ctx.offset(beta), y=ctx.offset(node), eps=node.op.eps)]

"""Conv family: Conv and ConvTranspose (1-D/2-D/3-D, any stride, padding, dilation and groups, with
the bias (+ Conv's residual) + activation epilogue), Pool and AdaptivePool (conv_pool.py), Im2Col
(conv_direct.py).

Conv and ConvTranspose take one of two kernels, both reading x in place (no im2col buffer):

* an implicit GEMM (conv_gemm.py) when a group has at least ``DIRECT_MAX_CHANNELS`` output channels
  (ResNet-style convs, 1x1 projections, a stem's 3 -> 64 channels): workgroup tiles of gathered input
  patches and weights, register tiles of 4-8 positions x 1-8 channels per thread (conv_gemm, and
  conv_gemm_taps for deep convs over few positions);
* the direct kernel (conv_direct.py) below that (depthwise, channel multipliers, a projection to a
  few channels), where a GEMM tile of 16 channels would mostly idle: one invocation per output.

Stride-1 3x3 convs with many channels and tiles (ResNet's 3x3 convs past the stem) take Winograd
F(4x4, 3x3) instead (conv_winograd.py: transforms around a batched tiled GEMM) where the arena's
scratch holds its transformed operands.

A transposed conv is the same gather with another tap map (include/conv_window_transpose.wgsl: output
o reads input (o + pad - t*dil)/s where that divides). f16 / bf16 convs, pools and im2col run the same
kernels on f32 copies (conv_half.py); other dtypes run as host steps.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.conv import Geometry
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.lowering import conv_direct, conv_gemm, conv_pool, conv_winograd
from rlxpy.wgpu_backend.lowering.conv_geometry import epilogue_expr, window_fields
from rlxpy.wgpu_backend.lowering.conv_half import half_scratch, half_steps, is_half
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

#: Groups with fewer output channels than this run the direct kernel.
DIRECT_MAX_CHANNELS = 8
#: Benches and tests only: force "gemm" or "direct". Not a user flag.
FORCE_PATH: str | None = None

#: Ops lowered as host steps, with the reason each has no kernel yet.
HOST_OPS: dict[type[ops.Op], str] = {}


def conv_dims(node: Node, x: Node) -> dict[str, int]:
    """The ConvParams sizes (no offsets) of a Conv or ConvTranspose node reading ``x``."""
    op = node.op
    in_sizes, out_sizes = tuple(x.shape[2:]), tuple(node.shape[2:])
    geo = op.geometry(len(in_sizes))
    c_in, c_out, groups = int(x.shape[1]), int(node.shape[1]), op.groups
    kvol = math.prod(geo.kernel)
    positions = math.prod(out_sizes)
    return dict(total=node.numel, positions=positions, m=int(x.shape[0]) * positions,
                kdim=c_in // groups * kvol, kvol=kvol, c_in=c_in, c_in_g=c_in // groups, c_out=c_out,
                c_out_g=c_out // groups, groups=groups, **window_fields(in_sizes, out_sizes, geo))


def use_direct(dims: dict[str, int]) -> bool:
    if FORCE_PATH is not None:
        return FORCE_PATH == "direct" and conv_direct.fits_budget(dims)
    return dims["c_out_g"] < DIRECT_MAX_CHANNELS and conv_direct.fits_budget(dims)


def conv_scratch(node: Node, graph: Graph) -> int:
    """Bytes of split-K partial sums the node's GEMM wants (0 for direct or unsplit convs), plus a half
    node's f32 copies (conv_half.py)."""
    if is_half(node) and node.numel:
        return half_scratch(node, graph, conv_scratch)
    if node.dtype is not DType.F32 or node.numel == 0:
        return 0
    x = graph.nodes[node.inputs[0]]
    dims = conv_dims(node, x)
    gemm = 0 if use_direct(dims) else conv_gemm.split_scratch_bytes(dims)
    if FORCE_PATH is None and conv_winograd.chosen(node, x):
        return max(gemm, conv_winograd.scratch_bytes(conv_winograd.sizes(node, x)))
    return gemm


@lowers(ops.Conv, ops.ConvTranspose, scratch=conv_scratch)
def lower_conv(node: Node, ctx: LowerCtx) -> list[Step]:
    """act(conv(x, w) + bias (+ residual)), forward or transposed, on Winograd, the implicit GEMM or the
    direct kernel."""
    if is_half(node):
        return half_steps(node, ctx, lower_conv)
    if node.dtype is not DType.F32:
        return host_steps(node, ctx)
    if node.numel == 0:
        return []
    x, w, *bias = ctx.inputs(node)
    residual = bias.pop() if getattr(node.op, "residual", False) else None
    fields = {**conv_dims(node, x), "x": ctx.offset(x), "w": ctx.offset(w),
              "bias": ctx.offset(bias[0]) if bias else 0, "y": ctx.offset(node), "has_bias": int(bool(bias)),
              "residual": ctx.offset(residual) if residual is not None else 0,
              "has_residual": int(residual is not None)}
    subs = {"MODE": "transpose" if isinstance(node.op, ops.ConvTranspose) else "forward",
            "EXPR": epilogue_expr(node), "KD": fields["k_d"], "KH": fields["k_h"], "KW": fields["k_w"],
            "KVOL": fields["kvol"]}
    if FORCE_PATH is None and conv_winograd.chosen(node, x):
        wino = conv_winograd.steps(node, ctx, (x, w, bias[0] if bias else None, residual), subs["EXPR"])
        if wino is not None:
            return wino
    if use_direct(fields):
        return conv_direct.direct_steps(node, ctx, fields, subs)
    return conv_gemm.gemm_steps(node, ctx, fields, subs)


def half_only_scratch(node: Node, graph: Graph) -> int:
    """Scratch of a pool or im2col: a half node's f32 copies only."""
    return half_scratch(node, graph) if is_half(node) and node.numel else 0


@lowers(ops.Pool, ops.AdaptivePool, scratch=half_only_scratch)
def lower_pool(node: Node, ctx: LowerCtx) -> list[Step]:
    """Windowed and adaptive pooling (max/min propagate NaN; mean's divisor as the IR defines it)."""
    if is_half(node):
        return half_steps(node, ctx, lower_pool)
    if node.dtype is not DType.F32:
        return host_steps(node, ctx)
    return conv_pool.pool_steps(node, ctx)


@lowers(ops.Im2Col, scratch=half_only_scratch)
def lower_im2col(node: Node, ctx: LowerCtx) -> list[Step]:
    """Patch rows of x, zero padding: one invocation per output element."""
    if is_half(node):
        return half_steps(node, ctx, lower_im2col)
    if node.dtype is not DType.F32:
        return host_steps(node, ctx)
    if node.numel == 0:
        return []
    (x,) = ctx.inputs(node)
    kernel, stride, padding, dilation = node.op.windows()
    geo = Geometry(kernel, stride, padding, padding, dilation)
    in_sizes = tuple(x.shape[2:])
    h_out = (in_sizes[0] + 2 * padding[0] - geo.span(0)) // stride[0] + 1
    w_out = (in_sizes[1] + 2 * padding[1] - geo.span(1)) // stride[1] + 1
    kvol = kernel[0] * kernel[1]
    c_in = int(x.shape[1])
    fields = dict(total=node.numel, positions=h_out * w_out, m=node.shape[0], kdim=c_in * kvol, kvol=kvol,
                  c_in=c_in, c_in_g=c_in, c_out=0, c_out_g=0, groups=1,
                  **window_fields(in_sizes, (h_out, w_out), geo), x=ctx.offset(x), w=0, bias=0,
                  y=ctx.offset(node), has_bias=0, residual=0, has_residual=0)
    return conv_direct.im2col_steps(node, ctx, fields)

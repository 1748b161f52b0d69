"""Winograd F(2x2, 3x3) for stride-1, dilation-1, ungrouped 3x3 2-D convs with many channels and
positions (ResNet's 3x3 convs past the stem at batch 32): four steps over the arena's scratch.

1. conv_winograd_weights: ``U[t] = G g G^T`` for every (co, ci) kernel g, 16 matrices [C_out, C_in]
   (a step of every run: a weight that is a graph input may change between runs).
2. conv_winograd_input: ``V[t] = B^T d B`` for every input channel and output tile (2 x 2 outputs,
   a 4 x 4 input patch d), 16 matrices [C_in, cols]; cols = the tiles rounded up to 4 (zero columns).
3. the tiled GEMM (matmul_tiled, batched over the 16 points t): ``M[t] = U[t] V[t]`` [C_out, cols].
4. conv_winograd_output: ``Y = A^T M A`` per tile and channel, + bias, + residual, activation; a
   tile whose M holds a NaN or inf is recomputed by the direct sum, so non-finite values propagate
   exactly as the conv's definition says (the transforms would smear them over the whole patch, and
   make inf - inf = NaN).

The GEMM does 16 * C_in MACs per tile and output channel against 36 * C_in for the 2 x 2 outputs
the implicit GEMM computes: 2.25x fewer, for the transforms' memory traffic (V and M are 16/4 = 4x the
input and output).

Numerics (f32): G's entries are 0, +-1/2 and 1, B's and A's 0 and +-1, so the transforms scale
exactly and round only in their additions (2^-24 relative each): a U entry sums up to 9 kernel terms
times 1/4 in two passes of 2 additions, a V entry 4 patch terms in two passes of 1, an output 9 points
in two passes of 2. An
output is ``sum over the 16 points of A-weights x (sum over C_in of u * v)``: the per-point GEMM sums
C_in products (the implicit GEMM: 9 C_in), so the accumulated rounding is ``~ (C_in + 16) eps`` times
``sum |u||v|``, where |u| <= 9/4 max|g| and |v| <= 4 max|d| per term grow the magnitudes the rounding
is relative to by a small constant (cancellation in the transforms, not new error). Measured against
float64 on ResNet-18's 3x3 layers at batch 32 (benches/bench_conv.py, H200): max error / max |y|
2.6e-7 to 7.1e-7 for Winograd against 5.9e-7 to 1.2e-6 for the implicit GEMM; the test file holds it
within 3x of the implicit GEMM's at C_in = 256. Only F(2x2, 3x3) is built: F(4x4, 3x3)'s points (0,
+-1, +-2, +-1/2) put entries up to 8 and 1/4 in its transforms, whose growth in f32 was not measured
against the 1e-4 logits bar here.

The steps need ``scratch_bytes`` of the arena's scratch inside the node's bind window; where the
scratch falls short (a capped binding), conv.py keeps the implicit GEMM.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import I32, U32, kernel, params
from rlxpy.wgpu_backend.lowering.matmul import MATMUL_TILED, choose_tile, tiled_source
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import MAX_GROUPS, LowerCtx, Step

WINOGRAD_PARAMS = params(
    "ConvWinogradParams", total=U32, c_in=U32, c_out=U32, in_h=U32, in_w=U32, out_h=U32, out_w=U32,
    p_h=I32, p_w=I32, tiles_h=U32, tiles_w=U32, tiles=U32, cols=U32, x=U32, w=U32, bias=U32, y=U32,
    has_bias=U32, residual=U32, has_residual=U32, u=U32, v=U32, mt=U32)
F32 = DType.F32
WEIGHTS = kernel("conv_winograd_weights", WINOGRAD_PARAMS, dtypes=accepts(F32, F32, F32, out=F32))
INPUT = kernel("conv_winograd_input", WINOGRAD_PARAMS, dtypes=accepts(F32, F32, F32, out=F32))
OUTPUT = kernel("conv_winograd_output", WINOGRAD_PARAMS, dtypes=accepts(F32, F32, F32, out=F32))
POINTS = 16  # (2 + 3 - 1)^2 transform points
#: Convs with fewer input or output channels than MIN_CHANNELS, fewer output tiles (2 x 2 outputs, all
#: images) than MIN_TILES or fewer GEMM MACs per point (tiles x C_in x C_out) than MIN_MACS keep the
#: implicit GEMM: the transforms' traffic is paid per channel while the GEMM's saving grows with C_in,
#: and a small grid leaves the GPU idle where the implicit GEMM splits K. Measured on an H200
#: (2026-11-26, benches/bench_conv.py, conv + bias + ReLU, GPU ms, implicit GEMM -> Winograd):
#: ResNet-18 at batch 32, layer1 64 ch 0.291 -> 0.239, layer2 128 ch 0.290 -> 0.250, layer3 256 ch 0.340
#: -> 0.232, layer4 512 ch (512 tiles) 0.376 -> 0.195; at batch 1 (before the transforms were written
#: out, when layer1 at batch 32 still lost 0.292 -> 0.355) layer1 0.038 -> 0.042, layer2 (196 tiles)
#: 0.039 -> 0.043, layer3 0.046 -> 0.051, layer4 0.043 -> 0.074.
MIN_CHANNELS = 64
MIN_TILES = 512
MIN_MACS = 1 << 23
#: Benches and tests only: "on" forces Winograd wherever it applies, "off" never. Not a user flag.
FORCE: str | None = None


def applies(node: Node, x: Node) -> bool:
    """A forward 2-D f32 conv with a 3x3 window, stride 1, dilation 1 and one group."""
    op = node.op
    if not isinstance(op, ops.Conv) or node.rank != 4 or node.dtype is not F32 or op.groups != 1:
        return False
    geo = op.geometry(2)
    return geo.kernel == (3, 3) and geo.stride == (1, 1) and geo.dilation == (1, 1) and x.rank == 4


def sizes(node: Node, x: Node) -> dict[str, int]:
    """The ConvWinogradParams sizes (no offsets) of ``node`` reading ``x``."""
    geo = node.op.geometry(2)
    n, c_in, in_h, in_w = (int(d) for d in x.shape)
    out_h, out_w = int(node.shape[2]), int(node.shape[3])
    tiles_h, tiles_w = math.ceil(out_h / 2), math.ceil(out_w / 2)
    tiles = n * tiles_h * tiles_w
    return dict(c_in=c_in, c_out=int(node.shape[1]), in_h=in_h, in_w=in_w, out_h=out_h, out_w=out_w,
                p_h=geo.begin[0], p_w=geo.begin[1], tiles_h=tiles_h, tiles_w=tiles_w, tiles=tiles,
                cols=4 * math.ceil(tiles / 4))


def scratch_bytes(s: dict[str, int]) -> int:
    """U, V and M: 16 matrices each of [C_out, C_in], [C_in, cols] and [C_out, cols], f32."""
    return 4 * POINTS * (s["c_out"] * s["c_in"] + s["c_in"] * s["cols"] + s["c_out"] * s["cols"])


def chosen(node: Node, x: Node) -> bool:
    """Whether conv.py lowers ``node`` here (when the scratch allows): many channels and tiles."""
    if FORCE == "off" or not applies(node, x):
        return False
    s = sizes(node, x)
    if math.ceil(s["cols"] / 64) > MAX_GROUPS or s["c_in"] * 10 > LOOP_BUDGET:  # grid; the direct fallback
        return False
    if FORCE == "on":
        return True
    return (min(s["c_in"], s["c_out"]) >= MIN_CHANNELS and s["tiles"] >= MIN_TILES
            and s["tiles"] * s["c_in"] * s["c_out"] >= MIN_MACS)


def steps(node: Node, ctx: LowerCtx, operands: tuple[Node, Node, Node | None, Node | None], expr: str
          ) -> list[Step] | None:
    """The four steps over ``operands`` = (x, w, bias or None, residual or None), or None where
    ``ctx.scratch`` inside the window is too small for U, V and M."""
    x, w, bias, residual = operands
    s = sizes(node, x)
    base, size = ctx.scratch
    inside = base >= ctx.window_base and base + size <= ctx.window_base + ctx.window_size
    if not inside or size < scratch_bytes(s):
        return None
    u = (base - ctx.window_base) // 4
    v = u + POINTS * s["c_out"] * s["c_in"]
    mt = v + POINTS * s["c_in"] * s["cols"]
    fields = dict(s, x=ctx.offset(x), w=ctx.offset(w), bias=ctx.offset(bias) if bias is not None else 0,
                  y=ctx.offset(node), has_bias=int(bias is not None),
                  residual=ctx.offset(residual) if residual is not None else 0,
                  has_residual=int(residual is not None), u=u, v=v, mt=mt)
    c_in, c_out, cols = s["c_in"], s["c_out"], s["cols"]

    def items(kern, total: int, subs: dict[str, object] | None = None) -> Step:
        return ctx.dispatch(kern, node, ctx.grid_1d(total), subs, False, **{**fields, "total": total})

    gemm = dict(m=c_out, n=cols, k=c_in, a=u, w=v, y=mt, bias=0, has_bias=0, stride_a=c_out * c_in,
                stride_w=c_in * cols, stride_y=c_out * cols, split1=cols, split2=cols, block_rows=c_out,
                k_len=c_in)
    bm, bn = choose_tile(c_out, cols, POINTS)
    vec4 = all(gemm[f] % 4 == 0 for f in ("n", "k", "a", "w", "y"))
    grid = (math.ceil(cols / bn), math.ceil(c_out / bm), POINTS)
    return [items(WEIGHTS, c_out * c_in), items(INPUT, c_in * cols),
            ctx.dispatch(MATMUL_TILED, node, grid, tiled_source(bm, bn, vec4, "v"), False,
                         operands=[x, w], **gemm),
            items(OUTPUT, c_out * cols, {"EXPR": expr})]

"""Winograd F(m x m, 3x3) (m = 4 by default, 2 where forced) for stride-1, dilation-1, ungrouped 3x3
2-D convs with many channels and positions (ResNet's 3x3 convs past the stem at batch 32): four parts
in three dispatches over the arena's scratch, with n = m + 2 transform points per axis
(conv_winograd_transforms.py makes the matrices and the kernels' written-out statements).

1. weights: ``U[t] = G g G^T`` for every (co, ci) kernel g, n^2 matrices [C_out, C_in]
   (every run: a weight that is a graph input may change between runs).
2. input: ``V[t] = B^T d B`` for every input channel and output tile (m x m outputs,
   an n x n input patch d), n^2 matrices [C_in, cols]; cols = the tiles rounded up to 4 (zero columns).
   Parts 1 and 2 are one dispatch of conv_winograd_operands (its first items transform the weights):
   one barrier fewer, and the weights' few items (4096 for 64 channels) no longer leave the GPU idle
   in a dispatch of their own (``SEPARATE_OPERANDS`` splits it in two, for benches).
3. the tiled GEMM (matmul_tiled, batched over the n^2 points t): ``M[t] = U[t] V[t]`` [C_out, cols].
4. conv_winograd_output: ``Y = A^T M A`` per tile and channel, + bias, + residual, activation; a
   tile whose M holds a NaN or inf is recomputed by the direct sum, so non-finite values propagate
   exactly as the conv's definition says (the transforms would smear them over the whole patch, and
   make inf - inf = NaN).

Per output and channel the GEMM does n^2 / m^2 * C_in MACs (F(2x2): 4 C_in, F(4x4): 2.25 C_in) against
9 C_in on the implicit GEMM, and V and M are n^2 / m^2 times the input and output (4 and 2.25): F(4x4)
saves on both, for partly empty tiles where the size is not a multiple of 4 (14 x 14: 16 x 16 computed).

Numerics (f32): an output is ``sum over the n^2 points of A-weights x (sum over C_in of u * v)``: the
per-point GEMM sums C_in products (the implicit GEMM: 9 C_in), so the GEMM's rounding is ``~ C_in eps``
relative to ``sum |u||v|``; the transforms add their own roundings and, more, scale the magnitudes that
rounding is relative to: F(2x2)'s entries are 0, +-1/2, +-1 (the error stays that of the direct sum),
F(4x4)'s reach 8 (A^T's a^3 at a = -2) and 16/15 (G), so its error is several times larger.
Measured in numpy against float64 (one conv, C_in 64 / 256 / 512, max |error| / max |y|): direct
1.6e-7 to 3.3e-7, F(2x2) 1.8e-7 to 3.4e-7, F(4x4) 1.3e-6 to 1.9e-6 with the points
conv_winograd_transforms.py chose (2.2e-6 to 7.5e-6 with others). tests/ops/test_conv_winograd.py
holds F(4x4) within 5e-6 of max |y| at C_in = 256 and ResNet-18's logits with F(4x4) forced within
1e-4 of float64 eager (measured 1.5e-6 at 32 x 32; at batch 32, 224 x 224 on an H100 8.6e-7 against
F(2x2)'s 6.6e-7).

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
from rlxpy.wgpu_backend.lowering import conv_winograd_transforms as transforms
from rlxpy.wgpu_backend.lowering.matmul import MATMUL_TILED, choose_tile, tiled_source
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import MAX_GROUPS, LowerCtx, Step

WINOGRAD_PARAMS = params(
    "ConvWinogradParams", total=U32, c_in=U32, c_out=U32, in_h=U32, in_w=U32, out_h=U32, out_w=U32,
    p_h=I32, p_w=I32, tiles_h=U32, tiles_w=U32, tiles=U32, cols=U32, x=U32, w=U32, bias=U32, y=U32,
    has_bias=U32, residual=U32, has_residual=U32, u=U32, v=U32, mt=U32, w_items=U32, item0=U32)
F32 = DType.F32
OPERANDS = kernel("conv_winograd_operands", WINOGRAD_PARAMS, dtypes=accepts(F32, F32, F32, out=F32))
OUTPUT = kernel("conv_winograd_output", WINOGRAD_PARAMS, dtypes=accepts(F32, F32, F32, out=F32))
#: outputs per tile side (m of F(m x m, 3x3)): 2 or 4. Measured on an H100 (2026-11-26,
#: benches/bench_conv.py, ResNet-18's stride-1 3x3 convs + bias + ReLU at batch 32, GPU ms, F(4x4) /
#: F(2x2) / implicit GEMM): layer1 0.212 / 0.273 / 0.291, layer2 0.176 / 0.208 / 0.290, layer3 0.183 /
#: 0.212 / 0.342, layer4 0.205 / 0.206 / 0.383; the whole resnet18 at batch 32 (bench_cnn.py, GPU
#: profile) 3.78 against 4.25 ms. The batched GEMM's tile: 64 x 64 everywhere gave the same model
#: time (3.76), 128 x 128 more (4.28), so choose_tile's stays.
TILE = 4
#: Convs with fewer input or output channels than MIN_CHANNELS, fewer 2 x 2 output tiles (all images;
#: counted in 2 x 2 tiles whatever m is) than MIN_TILES or fewer MACs per point of F(2x2) (2 x 2 tiles x
#: C_in x C_out) than MIN_MACS keep the implicit GEMM: the transforms' traffic is paid per channel
#: while the GEMM's saving grows with C_in, and a small grid leaves the GPU idle where the implicit
#: GEMM splits K. Measured on an H200 with F(2x2) (2026-11-26, benches/bench_conv.py, conv + bias +
#: ReLU, GPU ms, implicit GEMM -> Winograd):
#: ResNet-18 at batch 32, layer1 64 ch 0.291 -> 0.239, layer2 128 ch 0.290 -> 0.250, layer3 256 ch 0.340
#: -> 0.232, layer4 512 ch (512 tiles) 0.376 -> 0.195; at batch 1 (before the transforms were written
#: out, when layer1 at batch 32 still lost 0.292 -> 0.355) layer1 0.038 -> 0.042, layer2 (196 tiles)
#: 0.039 -> 0.043, layer3 0.046 -> 0.051, layer4 0.043 -> 0.074.
MIN_CHANNELS = 64
MIN_TILES = 512
MIN_MACS = 1 << 23
#: Benches and tests only: "on" forces Winograd wherever it applies, "off" never; FORCE_TILE forces
#: m; FORCE_GEMM_TILE the batched GEMM's "BMxBN" (64x64, 64x128, 128x64, 128x128). Not user flags.
FORCE: str | None = None
FORCE_TILE: int | None = None
FORCE_GEMM_TILE: str | None = None
#: Benches only: the weight and input transforms as two dispatches (the default is one).
SEPARATE_OPERANDS = False


def tile() -> int:
    """m of F(m x m, 3x3)."""
    return FORCE_TILE or TILE


def points() -> int:
    """Transform points of one tile, (m + 2)^2: the GEMM's batch."""
    return (tile() + 2) ** 2


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
    m = tile()
    tiles_h, tiles_w = math.ceil(out_h / m), math.ceil(out_w / m)
    tiles = n * tiles_h * tiles_w
    return dict(c_in=c_in, c_out=int(node.shape[1]), in_h=in_h, in_w=in_w, out_h=out_h, out_w=out_w,
                p_h=geo.begin[0], p_w=geo.begin[1], tiles_h=tiles_h, tiles_w=tiles_w, tiles=tiles,
                cols=4 * math.ceil(tiles / 4))


def scratch_bytes(s: dict[str, int]) -> int:
    """U, V and M: (m + 2)^2 matrices each of [C_out, C_in], [C_in, cols] and [C_out, cols], f32."""
    return 4 * points() * (s["c_out"] * s["c_in"] + s["c_in"] * s["cols"] + s["c_out"] * s["cols"])


def chosen(node: Node, x: Node) -> bool:
    """Whether conv.py lowers ``node`` here (when the scratch allows): many channels and tiles."""
    if FORCE == "off" or not applies(node, x):
        return False
    s = sizes(node, x)
    # the grid; a non-finite tile's direct sums (one loop step per output and input channel)
    if math.ceil(s["cols"] / 64) > MAX_GROUPS or tile() ** 2 * (s["c_in"] + 1) > LOOP_BUDGET:
        return False
    if FORCE == "on":
        return True
    quads = x.shape[0] * math.ceil(s["out_h"] / 2) * math.ceil(s["out_w"] / 2)  # 2 x 2 tiles, whatever m
    return (min(s["c_in"], s["c_out"]) >= MIN_CHANNELS and quads >= MIN_TILES
            and quads * s["c_in"] * s["c_out"] >= MIN_MACS)


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
    batch, m = points(), tile()
    v = u + batch * s["c_out"] * s["c_in"]
    mt = v + batch * s["c_in"] * s["cols"]
    fields = dict(s, x=ctx.offset(x), w=ctx.offset(w), bias=ctx.offset(bias) if bias is not None else 0,
                  y=ctx.offset(node), has_bias=int(bias is not None),
                  residual=ctx.offset(residual) if residual is not None else 0,
                  has_residual=int(residual is not None), u=u, v=v, mt=mt)
    c_in, c_out, cols = s["c_in"], s["c_out"], s["cols"]

    w_items = c_out * c_in
    operand_code = {"TILE": m, "WEIGHTS": transforms.weights_code(m), "INPUT": transforms.input_code(m)}

    def items(kern, first: int, end: int, subs: dict[str, object]) -> Step:
        return ctx.dispatch(kern, node, ctx.grid_1d(end - first), subs, False,
                            **{**fields, "total": end, "item0": first, "w_items": w_items})

    parts = [(0, w_items), (w_items, w_items + c_in * cols)] if SEPARATE_OPERANDS else [
        (0, w_items + c_in * cols)]

    gemm = dict(m=c_out, n=cols, k=c_in, a=u, w=v, y=mt, bias=0, has_bias=0, stride_a=c_out * c_in,
                stride_w=c_in * cols, stride_y=c_out * cols, split1=cols, split2=cols, block_rows=c_out,
                k_len=c_in, w_bytes=0, row_bytes=0)
    bm, bn = choose_tile(c_out, cols, batch)
    if FORCE_GEMM_TILE:
        bm, bn = (int(v) for v in FORCE_GEMM_TILE.split("x"))
    vec4 = all(gemm[f] % 4 == 0 for f in ("n", "k", "a", "w", "y"))
    grid = (math.ceil(cols / bn), math.ceil(c_out / bm), batch)
    return [*(items(OPERANDS, first, end, operand_code) for first, end in parts),
            ctx.dispatch(MATMUL_TILED, node, grid, tiled_source(bm, bn, vec4, "v"), False,
                         operands=[x, w], **gemm),
            items(OUTPUT, 0, c_out * cols, {"TILE": m, "TRANSFORM": transforms.output_code(m), "EXPR": expr})]

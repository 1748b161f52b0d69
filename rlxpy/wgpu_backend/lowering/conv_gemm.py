"""The implicit-GEMM conv (conv_gemm.wgsl) for channel-heavy Conv and ConvTranspose.

Per group g, the conv is ``Y[m, o] = sum_k A[m, k] W[o, k]`` with rows m = (n, output position),
columns o = the group's output channels and K = (input channel, window tap); A is gathered from x as
the tile loads it, so no im2col buffer exists. A tile is BM x BN on 16 x 16 threads: BM = 64 or 128
positions (4 or 8 per thread, read as vec4s), BN = 16, 32 or 64 channels (1, 2 or 4 per thread), the
smallest BN holding the group's channels. The larger BM wins while the grid still has
``MIN_GROUPS`` workgroups. The per-thread statement blocks below are unrolled here so the
accumulators are indexed by constants only (a dynamically indexed register array spills).

Split-K: a grid of fewer than ``SPLIT_BELOW`` workgroups (a batch-1 conv deep in a network: 7 x 7
positions, 512 channels) would leave most of a big GPU idle while each workgroup walks all of K. K
is then cut into up to ``SPLIT_MAX`` chunks of at least ``SPLIT_MIN_STEPS`` steps, each stores its
partial sums in the arena's scratch (``@lowers(scratch=)``), and conv_split_sum adds them in order and
applies the epilogue.
"""

from __future__ import annotations

import math

from rlxpy.errors import LimitError, where
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import kernel
from rlxpy.wgpu_backend.lowering.conv_geometry import CONV_PARAMS
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import MAX_GROUPS, LowerCtx, Step

BK = 8  # K per step (kernel constant)
THREADS = 256
CONV_GEMM = kernel(
    "conv_gemm", CONV_PARAMS, dtypes=accepts(DType.F32, DType.F32, DType.F32, out=DType.F32),  # x, w, bias
    # the double-buffered tiles: [2][BK][BM] of A and [2][BK][BN] of w (BM = 128, BN = 64: 12 KiB)
    workgroup=(16, 16, 1), shared_bytes=lambda s: 16 * int(s["A_VECS"]) + 4 * int(s["TN"]) * int(s["W_VECS"]),
    sizes={"A_VECS": 2 * BK * 128 // 4, "W_VECS": 2 * BK * 64 // 4, "TN": 4})
CONV_SPLIT_SUM = kernel("conv_split_sum", CONV_PARAMS, dtypes=accepts(DType.F32, DType.F32, DType.F32,
                                                                       out=DType.F32))
#: Tile rows (output positions) from the largest; the first giving MIN_GROUPS workgroups is taken.
TILE_ROWS = (128, 64)
MIN_GROUPS = 256
#: Split K when the grid has fewer workgroups than this; aim at SPLIT_TARGET workgroups.
SPLIT_BELOW = 128
SPLIT_TARGET = 256
SPLIT_MAX = 16
SPLIT_MIN_STEPS = 32  # K steps of BK per split at least
#: Benches and tests only: force a BM, or a split count. Not user flags.
FORCE_ROWS: int | None = None
FORCE_SPLITS: int | None = None


def tile_cols(channels: int) -> int:
    """BN: 16, 32 or 64 channels, the smallest holding the group's output channels (64 past that)."""
    return next((bn for bn in (16, 32) if channels <= bn), 64)


def tile_rows(m: int, n_tiles: int, groups: int) -> int:
    if FORCE_ROWS is not None:
        return FORCE_ROWS
    return next((bm for bm in TILE_ROWS if math.ceil(m / bm) * n_tiles * groups >= MIN_GROUPS), TILE_ROWS[-1])


#: tile_w's element type by channels per thread: a thread reads its channels of one k as one value
W_TYPES = {1: "f32", 2: "vec2<f32>", 4: "vec4<f32>"}


def loads(bm: int, bn: int, runs: bool) -> list[str]:
    """The loads of one K step into registers. With channel runs the step's 8 k share one window
    tap: it is decoded once (and where it reads, for A), else every element decodes its own k."""
    count, rows = bm * BK // THREADS, THREADS // bm  # A elements per thread, k rows between them
    w_count = -(-bn * BK // THREADS)
    if not runs:
        lines = [f"    na{r} = gather_a(ok, row, od, oh, ow, k0 + ak + {r * rows}u, in_size);"
                 for r in range(count)]
        w_load = [f"nw{r} = gather_w(g, o0 + wo + {32 * r}u, k0 + wk);" for r in range(w_count)]
        indent = "    "
    else:
        lines = ["    {",
                 "        let tap = k0 / p.c_in_g;",
                 "        let c0 = k0 - tap * p.c_in_g;",
                 "        let offset = window_offset(od, oh, ow, tap);",
                 "        let first = p.x + (row + c0 + ak) * in_size + u32(max(offset, 0));",
                 "        if (ok && offset >= 0) {",
                 *(f"            na{r} = ld_f32(first + {r * rows}u * in_size);" for r in range(count)),
                 "        } else {",
                 *(f"            na{r} = 0.0;" for r in range(count)),
                 "        }"]
        w_load = [f"nw{r} = load_w(g, o0 + wo + {32 * r}u, c0 + wk, tap);" for r in range(w_count)]
        indent = "        "
    for r, text in enumerate(w_load):
        guarded = 32 * (r + 1) > bn  # BN = 16: half the threads load no w
        lines.append(f"{indent}if (wo + {32 * r}u < BN) {{ {text} }}" if guarded else f"{indent}{text}")
    return lines + (["    }"] if runs else [])


def blocks(bm: int, bn: int, runs: bool) -> dict[str, object]:
    """The placeholders of conv_gemm.wgsl for one tile shape: register declarations, the loads of one
    K step (``runs``: the group's channels come in runs of BK), their staging into buffer ``b``, the
    sums of one step and the stores."""
    hs, tn = bm // 64, bn // 16
    a_count, a_rows = bm * BK // THREADS, THREADS // bm  # A elements per thread, k rows between them
    w_count = -(-bn * BK // THREADS)
    regs = [f"    var na{r} = 0.0;" for r in range(a_count)]
    regs += [f"    var nw{r} = 0.0;" for r in range(w_count)]
    stage = [f"    tile_a[b * A_STEP + (ak + {r * a_rows}u) * (BM / 4u) + am / 4u][am % 4u] = na{r};"
             for r in range(a_count)]
    for r in range(w_count):
        channel = f"(wo + {32 * r}u)"
        slot = f"tile_w[b * W_STEP + wk * (BN / TN) + {channel} / TN]"
        slot += f"[{channel} % TN]" if tn > 1 else ""
        text = f"{slot} = nw{r};"
        stage.append(f"    if (wo + {32 * r}u < BN) {{ {text} }}" if 32 * (r + 1) > bn else f"    {text}")
    lanes = ["w"] if tn == 1 else [f"w.{lane}" for lane in "xyzw"[:tn]]
    fma = []
    for kk in range(BK):
        fma.append("        {")
        fma += [f"            let a{h} = tile_a[ta + {kk * bm // 4 + 16 * h}u];" for h in range(hs)]
        fma.append(f"            let w = tile_w[tb + {kk * bn // tn}u];")
        fma += [f"            acc[{h * tn + j}] = acc[{h * tn + j}] + a{h} * {lanes[j]};"
                for h in range(hs) for j in range(tn)]
        fma.append("        }")
    store = [f"    store4(g, split, m0 + tx * 4u + {64 * h}u, o0 + ty * TN + {j}u, acc[{h * tn + j}]);"
             for h in range(hs) for j in range(tn)]
    return {"BM": bm, "BN": bn, "TN": tn, "W_TYPE": W_TYPES[tn], "A_VECS": 2 * BK * bm // 4,
            "W_VECS": 2 * BK * bn // tn, "ACC": hs * tn, "REGS": "\n".join(regs),
            "LOAD": "\n".join(loads(bm, bn, runs)), "STAGE": "\n".join(stage), "FMA": "\n".join(fma),
            "STORE": "\n".join(store)}


def tiles(dims: dict[str, int]) -> tuple[int, int, int]:
    """(BM, BN, workgroups of one split) for the ConvParams sizes ``dims``."""
    channels, groups = dims["c_out_g"], dims["groups"]
    bn = tile_cols(channels)
    n_tiles = math.ceil(channels / bn)
    bm = tile_rows(dims["m"], n_tiles, groups)
    return bm, bn, math.ceil(dims["m"] / bm) * n_tiles * groups


def wanted_splits(dims: dict[str, int]) -> int:
    """K chunks that bring a small grid near SPLIT_TARGET workgroups (1: no split)."""
    if FORCE_SPLITS is not None:
        return FORCE_SPLITS
    _, _, workgroups = tiles(dims)
    if workgroups >= SPLIT_BELOW:
        return 1
    steps = math.ceil(dims["kdim"] / BK)
    return max(1, min(math.ceil(SPLIT_TARGET / workgroups), steps // SPLIT_MIN_STEPS, SPLIT_MAX))


def split_scratch_bytes(dims: dict[str, int]) -> int:
    """Scratch the partial sums of the wanted split take (0 without a split)."""
    splits = wanted_splits(dims)
    return 0 if splits == 1 else 4 * splits * dims["total"]


def _splits(ctx: LowerCtx, dims: dict[str, int]) -> int:
    """wanted_splits, bounded by the scratch ``ctx.scratch`` offers inside this step's binding."""
    base, size = ctx.scratch
    if base < ctx.window_base or base + size > ctx.window_base + ctx.window_size:
        return 1
    return max(1, min(wanted_splits(dims), size // (4 * dims["total"])))


def gemm_steps(node: Node, ctx: LowerCtx, fields: dict[str, int], subs: dict[str, object]) -> list[Step]:
    """The implicit GEMM over ``fields`` (ConvParams but m_start and the split): one dispatch per run of
    65535 row tiles (grid z = groups x K splits), then conv_split_sum when K is split."""
    kdim, groups = fields["kdim"], fields["groups"]
    steps = math.ceil(kdim / BK)
    bm, bn, _ = tiles(fields)
    splits = _splits(ctx, fields)
    chunk = BK * math.ceil(steps / splits)  # K per split, whole steps
    splits = math.ceil(kdim / chunk)  # no empty split
    if math.ceil(chunk / BK) > LOOP_BUDGET:
        raise LimitError(f"{where(node)}: the implicit GEMM would run {chunk // BK} K steps in one GPU "
                         f"thread, more than the {LOOP_BUDGET} allowed (K = {kdim}; lavapipe stops at 65535)")
    part = (ctx.scratch[0] - ctx.window_base) // 4 if splits > 1 else 0
    fields = {**fields, "splits": splits, "k_chunk": chunk, "part": part}
    subs = {**subs, **blocks(bm, bn, fields["c_in_g"] % BK == 0)}
    row_tiles = math.ceil(fields["m"] / bm)
    n_tiles = math.ceil(fields["c_out_g"] / bn)
    out = [ctx.dispatch(CONV_GEMM, node, (min(MAX_GROUPS, row_tiles - start), n_tiles, groups * splits), subs,
                        False, m_start=start * bm, **fields)
           for start in range(0, row_tiles, MAX_GROUPS)]
    if splits > 1:
        out.append(ctx.dispatch(CONV_SPLIT_SUM, node, ctx.grid_1d(fields["total"]), {"EXPR": subs["EXPR"]},
                                False, m_start=0, **fields))
    return out

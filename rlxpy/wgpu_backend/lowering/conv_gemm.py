"""The implicit-GEMM convs for channel-heavy Conv and ConvTranspose: conv_gemm.wgsl, and
conv_gemm_taps.wgsl for deep convs over few positions (``is_deep``: ResNet's last stage at batch 32).

Per group g, the conv is ``Y[m, o] = sum_k A[m, k] W[o, k]`` with rows m = (n, output position),
columns o = the group's output channels and K = (input channel, window tap); A is gathered from x as
the tile loads it, so no im2col buffer exists. A tile is BM x BN on 16 x 16 threads: BM = 64 or 128
positions (4 or 8 per thread, read as vec4s). conv_gemm: BN = 16, 32 or 64 channels (1, 2 or 4 per
thread), the smallest holding the group's channels; the larger BM wins while the grid still has
``MIN_GROUPS`` workgroups; wide convs over few positions take 128 x 128 (8 channels per thread as two
vec4s, ``is_wide``). The per-thread statement blocks below are unrolled here so the
accumulators are indexed by constants only (a dynamically indexed register array spills).

conv_gemm walks K in steps of 8 k (16 when forced: no ResNet layer gained on the H200; tap-major when
the group's channels come in runs of the step, one tap decode per step; else each element decodes its
own k). conv_gemm_taps walks K in steps of CB whole
input channels (BK = CB * taps k, windows of at most ``TAPS_MAX`` taps): a conv's weights of one output
channel in a step are BK consecutive words, and a thread's A elements are the same (channel of the
step, tap) pairs in every step, so their window offsets are decoded once before the K loop; its tiles
reach 128 x 128 (8 x 8 outputs per thread). On the H100 it wins only where the deep route takes it
(see ``DEEP_MIN_COLS``): at equal tiles it holds more registers than conv_gemm (benches/RESULTS.md).

Split-K: a grid of fewer than ``SPLIT_BELOW`` workgroups (a batch-1 conv deep in a network: 7 x 7
positions, 512 channels) would leave most of a big GPU idle while each workgroup walks all of K. K
is then cut into up to ``SPLIT_MAX`` chunks of at least ``SPLIT_MIN_K`` k (a deep conv: as many as
fill one wave of ``WAVE`` workgroups), each stores its partial sums in the arena's scratch
(``@lowers(scratch=)``), and conv_split_sum adds them in order and applies the epilogue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlxpy.errors import LimitError, where
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import kernel
from rlxpy.wgpu_backend.lowering.conv_geometry import CONV_PARAMS
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import MAX_GROUPS, LowerCtx, Step

BK = 8  # conv_gemm's K per step by default (``gemm_bk``)
THREADS = 256
CONV_GEMM = kernel(
    "conv_gemm", CONV_PARAMS, dtypes=accepts(DType.F32, DType.F32, DType.F32, out=DType.F32),  # x, w, bias
    # the double-buffered tiles: [2][BK][BM] of A and [2][BK][BN] of w (BM = 128, BN = 64: 12 KiB)
    workgroup=(16, 16, 1), shared_bytes=lambda s: 16 * int(s["A_VECS"]) + 4 * int(s["WL"]) * int(s["W_VECS"]),
    sizes={"A_VECS": 2 * BK * 128 // 4, "W_VECS": 2 * BK * 64 // 4, "TN": 4, "WL": 4})
#: conv_gemm_taps takes windows of at most this many taps (its per-thread offsets live in registers)
TAPS_MAX = 16
CONV_GEMM_TAPS = kernel(
    "conv_gemm_taps", CONV_PARAMS, dtypes=accepts(DType.F32, DType.F32, DType.F32, out=DType.F32),
    workgroup=(16, 16, 1), shared_bytes=lambda s: 16 * int(s["A_VECS"]) + 4 * int(s["WL"]) * int(s["W_VECS"]),
    sizes={"A_VECS": 2 * 8 * 128 // 4, "W_VECS": 2 * 8 * 64 // 4, "WL": 4})
CONV_SPLIT_SUM = kernel("conv_split_sum", CONV_PARAMS, dtypes=accepts(DType.F32, DType.F32, DType.F32,
                                                                       out=DType.F32))
#: Tile rows (output positions) from the largest; the first giving MIN_GROUPS workgroups is taken.
TILE_ROWS = (128, 64)
MIN_GROUPS = 256
#: Tile columns (output channels) conv_gemm_taps may take when forced; conv_gemm takes up to 64.
TILE_COLS = (16, 32, 64, 128)
#: Workgroup memory every device offers (WebGPU's default limit); devices report more (the lowerer
#: reads DeviceFacts.max_workgroup_storage: 48 KiB on the H100, 32 KiB on lavapipe).
SHARED_BYTES = 16384
#: Split K when the grid has fewer workgroups than this; aim at SPLIT_TARGET workgroups.
SPLIT_BELOW = 128
SPLIT_TARGET = 256
SPLIT_MAX = 16
SPLIT_MIN_K = 256  # k per split at least
#: Deep convs over few positions take conv_gemm_taps with 128 x 128 tiles (64 accumulators per thread;
#: 64 x 128 where the device's workgroup memory is 16 KiB) and a K split that fills one wave of WAVE
#: workgroups: a group with at least DEEP_MIN_COLS output channels, K >= DEEP_MIN_K, at least
#: DEEP_MIN_ROWS positions, and a grid of 64 x 128 tiles below SPLIT_BELOW (ResNet-18's last stage at
#: batch 32: 1568 positions, K = 2304 / 4608). Measured on the H100 (benches/RESULTS.md, 2026-11-25):
#: the 3x3 512 -> 512 conv at batch 32 in 0.39 ms against 0.55 on conv_gemm's 64 x 64 tiles; on every
#: other ResNet-18 / MobileNet-V3 conv conv_gemm was as fast or faster, so it keeps them.
DEEP_MIN_COLS = 128
DEEP_MIN_K = 2048
DEEP_MIN_ROWS = 1024
#: Wide convs over few positions that the deep route leaves (at least WIDE_MIN_COLS output channels, K >=
#: WIDE_MIN_K, at least DEEP_MIN_ROWS positions and a grid of 128 x 128 tiles below SPLIT_BELOW:
#: ResNet-18's third stage at batch 32, 6272 positions x 256 channels) take conv_gemm on 128 x 128
#: tiles (8 x 8 outputs per thread) with a split filling one wave. Measured on the H200 (2026-11-26,
#: benches/RESULTS.md): layer3's 3x3 256 -> 256 conv 0.389 -> 0.337 ms, its stride-2 128 -> 256 conv
#: 0.205 -> 0.188; without the split, or on layer1/layer2 (64 / 128 channels), the tile was slower.
WIDE_MIN_COLS = 256
WIDE_MIN_K = 1024
#: one wave on the H100: 132 SMs x 2 resident workgroups of the 128 x 128 tile (264; 300 took 30%
#: longer than 200 on the 64 x 128 tile, two waves against one)
WAVE = 264
#: Benches and tests only: force a BM, a BN, a split count or the kernel ("taps", "gather"). Not user flags.
FORCE_ROWS: int | None = None
FORCE_COLS: int | None = None
FORCE_SPLITS: int | None = None
FORCE_KERNEL: str | None = None
FORCE_BK: int | None = None


@dataclass(frozen=True)
class Plan:
    """How one conv runs on the implicit GEMM: the kernel, its tile, its K steps."""

    taps: bool  # conv_gemm_taps (else conv_gemm)
    deep: bool  # the deep-conv route: splits fill one wave
    wide: bool  # the wide-conv route (conv_gemm on 128 x 128 tiles): splits fill one wave
    bm: int
    bn: int
    cb: int  # conv_gemm_taps: input channels per K step (0 for conv_gemm)
    bk: int  # k per K step
    steps: int  # K steps in all
    workgroups: int  # of one K split

    @property
    def unit(self) -> int:
        """What a K step advances by: input channels (conv_gemm_taps) or k (conv_gemm)."""
        return self.cb if self.taps else self.bk


def tile_cols(channels: int, taps: bool = False) -> int:
    """BN. conv_gemm: 16, 32 or 64 channels, the smallest holding the group's output channels (64 past
    that). conv_gemm_taps: the width of TILE_COLS that pads the channels least (the wider on a tie)."""
    if not taps:
        return next((bn for bn in (16, 32) if channels <= bn), 64)
    return min(TILE_COLS, key=lambda bn: (math.ceil(channels / bn) * bn, -bn))


def tile_rows(m: int, n_tiles: int, groups: int) -> int:
    if FORCE_ROWS is not None:
        return FORCE_ROWS
    return next((bm for bm in TILE_ROWS if math.ceil(m / bm) * n_tiles * groups >= MIN_GROUPS), TILE_ROWS[-1])


def _shared(bm: int, bn: int, bk: int) -> int:
    return 8 * bk * (bm + bn)  # [2][BK][BM] of A and [2][BK][BN] of w, f32


def is_deep(dims: dict[str, int]) -> bool:
    """The deep-conv route (see DEEP_MIN_COLS)."""
    channels = dims["c_out_g"]
    grid = math.ceil(dims["m"] / 64) * math.ceil(channels / 128) * dims["groups"]
    return (dims["kvol"] <= TAPS_MAX and channels >= DEEP_MIN_COLS and dims["kdim"] >= DEEP_MIN_K
            and dims["m"] >= DEEP_MIN_ROWS and grid < SPLIT_BELOW)


def is_wide(dims: dict[str, int]) -> bool:
    """The wide-conv route (see WIDE_MIN_COLS); the deep route comes first."""
    channels = dims["c_out_g"]
    grid = math.ceil(dims["m"] / 128) * math.ceil(channels / 128) * dims["groups"]
    return (channels >= WIDE_MIN_COLS and dims["kdim"] >= WIDE_MIN_K and dims["m"] >= DEEP_MIN_ROWS
            and grid < SPLIT_BELOW and not is_deep(dims))


def plan(dims: dict[str, int], shared_limit: int = SHARED_BYTES) -> Plan:
    """The kernel, tile and K steps for the ConvParams sizes ``dims`` on a device offering
    ``shared_limit`` bytes of workgroup memory."""
    kvol, channels, groups = dims["kvol"], dims["c_out_g"], dims["groups"]
    deep = FORCE_KERNEL is None and is_deep(dims)
    wide = FORCE_KERNEL is None and is_wide(dims)
    taps = deep or FORCE_KERNEL == "taps"
    if taps:
        cb = max(1, BK // kvol)
        bk, steps = cb * kvol, math.ceil(dims["c_in_g"] / cb)
    else:
        cb, bk = 0, FORCE_BK or BK
        steps = math.ceil(dims["kdim"] / bk)
    if deep or wide:
        bn = FORCE_COLS or 128
        bm = FORCE_ROWS or (128 if _shared(128, bn, bk) <= shared_limit else 64)
    else:
        bn = FORCE_COLS or tile_cols(channels, taps)
        bn = bn if taps or FORCE_COLS else min(bn, 64)  # 8 channels per conv_gemm thread only when forced
        bm = tile_rows(dims["m"], math.ceil(channels / bn), groups)
    while _shared(bm, bn, bk) > shared_limit and FORCE_ROWS is None and bm > 64:
        bm //= 2
    while _shared(bm, bn, bk) > shared_limit and FORCE_COLS is None and bn > 16:
        bn //= 2
    workgroups = math.ceil(dims["m"] / bm) * math.ceil(channels / bn) * groups
    return Plan(taps, deep, wide, bm, bn, cb, bk, steps, workgroups)


#: tile_w's element type by channels per thread: a thread reads its channels of one k as one value
W_TYPES = {1: "f32", 2: "vec2<f32>", 4: "vec4<f32>"}


def loads(bm: int, bn: int, runs: bool, bk: int = BK) -> list[str]:
    """The loads of one K step into registers. With channel runs the step's ``bk`` k share one window
    tap: it is decoded once (and where it reads, for A), else every element decodes its own k."""
    count, rows = bm * bk // THREADS, THREADS // bm  # A elements per thread, k rows between them
    w_count, w_rows = -(-bn * bk // THREADS), THREADS // bk  # w elements per thread, channels between them
    if not runs:
        lines = [f"    na{r} = gather_a(t, k0 + t.ak + {r * rows}u, in_size);"
                 for r in range(count)]
        w_load = [f"nw{r} = gather_w(g, o0 + wo + {w_rows * r}u, k0 + wk);" for r in range(w_count)]
        indent = "    "
    else:
        lines = ["    {",
                 "        let tap = k0 / p.c_in_g;",
                 "        let c0 = k0 - tap * p.c_in_g;",
                 "        let offset = window_offset(t, tap);",
                 "        let first = p.x + (t.row + c0 + t.ak) * in_size + u32(max(offset, 0));",
                 "        if (t.ok && offset >= 0) {",
                 *(f"            na{r} = ld_f32(first + {r * rows}u * in_size);" for r in range(count)),
                 "        } else {",
                 *(f"            na{r} = 0.0;" for r in range(count)),
                 "        }"]
        w_load = [f"nw{r} = load_w(g, o0 + wo + {w_rows * r}u, c0 + wk, tap);" for r in range(w_count)]
        indent = "        "
    for r, text in enumerate(w_load):
        guarded = w_rows * (r + 1) > bn  # BN = 16: half the threads load no w
        lines.append(f"{indent}if (wo + {w_rows * r}u < BN) {{ {text} }}" if guarded else f"{indent}{text}")
    return lines + (["    }"] if runs else [])


def blocks(bm: int, bn: int, runs: bool, bk: int = BK) -> dict[str, object]:
    """The placeholders of conv_gemm.wgsl for one tile shape and K step: register declarations, the
    loads of one K step (``runs``: the group's channels come in runs of ``bk``), their staging into
    buffer ``b``, the sums of one step and the stores. A thread holds TN = BN/16 channels as WV
    vectors of WL (TN = 8: two vec4s)."""
    hs, tn = bm // 64, bn // 16
    wl = min(tn, 4)
    a_count, a_rows = bm * bk // THREADS, THREADS // bm  # A elements per thread, k rows between them
    w_count, w_rows = -(-bn * bk // THREADS), THREADS // bk
    regs = [f"    var na{r} = 0.0;" for r in range(a_count)]
    regs += [f"    var nw{r} = 0.0;" for r in range(w_count)]
    stage = [f"    tile_a[b * A_STEP + (t.ak + {r * a_rows}u) * (BM / 4u) + t.am / 4u][t.am % 4u] = na{r};"
             for r in range(a_count)]
    for r in range(w_count):
        channel = f"(wo + {w_rows * r}u)"
        slot = f"tile_w[b * W_STEP + wk * (BN / WL) + {channel} / WL]"
        slot += f"[{channel} % WL]" if wl > 1 else ""
        text = f"{slot} = nw{r};"
        guarded = w_rows * (r + 1) > bn
        stage.append(f"    if (wo + {w_rows * r}u < BN) {{ {text} }}" if guarded else f"    {text}")
    lanes = ["" if wl == 1 else f".{lane}" for lane in "xyzw"[:wl]]
    fma = []
    for kk in range(bk):
        fma.append("        {")
        fma += [f"            let a{h} = tile_a[ta + {kk * bm // 4 + 16 * h}u];" for h in range(hs)]
        fma += [f"            let w{v} = tile_w[tb + {kk * bn // wl + v}u];" for v in range(tn // wl)]
        fma += [f"            acc[{h * tn + j}] = acc[{h * tn + j}] + a{h} * w{j // wl}{lanes[j % wl]};"
                for h in range(hs) for j in range(tn)]
        fma.append("        }")
    store = [f"    store4(g, split, t.m0 + tx * 4u + {64 * h}u, o0 + ty * TN + {j}u, acc[{h * tn + j}]);"
             for h in range(hs) for j in range(tn)]
    return {"BM": bm, "BN": bn, "BK": bk, "TN": tn, "WL": wl, "W_TYPE": W_TYPES[wl],
            "A_VECS": 2 * bk * bm // 4, "W_VECS": 2 * bk * bn // wl, "ACC": hs * tn, "REGS": "\n".join(regs),
            "LOAD": "\n".join(loads(bm, bn, runs, bk)), "STAGE": "\n".join(stage), "FMA": "\n".join(fma),
            "STORE": "\n".join(store), "NEXT": "k0 = k_begin + (s + 1u) * BK;"}


def taps_blocks(pl: Plan) -> dict[str, object]:
    """The placeholders of conv_gemm_taps.wgsl for plan ``pl``: the per-thread offsets and weight
    addresses (before the K loop), register declarations, the loads of one K step (input channels
    c0 ..), their staging into buffer ``b``, the sums of one step and the stores."""
    bm, bn, bk, cb = pl.bm, pl.bn, pl.bk, pl.cb
    hs, tn = bm // 64, bn // 16
    wl = min(tn, 4)  # channels per tile_w vector
    rows = THREADS // bm  # k rows between a thread's A elements
    a_count = -(-bk // rows)
    w_count = -(-bk * bn // THREADS)
    setup, regs, load, stage = [], [], [], []
    for r in range(a_count):
        setup.append(f"    let ka{r} = t.ak + {r * rows}u;")
        setup.append(f"    let off{r} = k_offset(t, ka{r});")
        regs.append(f"    var na{r} = 0.0;")
        if cb > 1:  # the step's channel of this k row, and whether it lies past the chunk's end
            setup.append(f"    let cb{r} = ka{r} / KVOL;")
            load += [f"    na{r} = 0.0;",
                     f"    if (off{r} >= 0 && c0 + cb{r} < c_end) {{ "
                     f"na{r} = ld_f32(x_row + (c0 + cb{r}) * in_size + u32(off{r})); }}"]
        else:
            load.append(f"    na{r} = select(0.0, ld_f32(x_row + c0 * in_size + u32(max(off{r}, 0))), "
                        f"off{r} >= 0);")
        text = f"tile_a[b * A_STEP + ka{r} * (BM / 4u) + t.am / 4u][t.am % 4u] = na{r};"
        stage.append(f"    if (ka{r} < BK) {{ {text} }}" if (r + 1) * rows > bk else f"    {text}")
    for r in range(w_count):
        partial = (r + 1) * THREADS > bk * bn
        setup += [f"    let we{r} = flat + {r * THREADS}u;",
                  f"    let wo{r} = we{r} / BK;",
                  f"    let wk{r} = we{r} % BK;",
                  f"    let wok{r} = {f'we{r} < BK * BN && ' if partial else ''}o0 + wo{r} < p.c_out_g;",
                  f"    let ws{r} = p.w + w_index(g, o0 + wo{r}, wk{r} / KVOL, wk{r} % KVOL);"]
        regs.append(f"    var nw{r} = 0.0;")
        tail = f" && c0 * KVOL + wk{r} < c_end * KVOL" if cb > 1 else ""  # a chunk's last step may be short
        load += [f"    nw{r} = 0.0;",
                 f"    if (wok{r}{tail}) {{ nw{r} = ld_f32(ws{r} + c0 * w_step); }}"]
        slot = f"tile_w[b * W_STEP + wk{r} * (BN / WL) + wo{r} / WL]" + (f"[wo{r} % WL]" if wl > 1 else "")
        stage.append(f"    if (we{r} < BK * BN) {{ {slot} = nw{r}; }}" if partial else f"    {slot} = nw{r};")
    lanes = ["" if wl == 1 else f".{lane}" for lane in "xyzw"[:wl]]
    fma = []
    for kk in range(bk):
        fma.append("        {")
        fma += [f"            let a{h} = tile_a[ta + {kk * bm // 4 + 16 * h}u];" for h in range(hs)]
        fma += [f"            let w{v} = tile_w[tb + {kk * bn // wl + v}u];" for v in range(tn // wl)]
        fma += [f"            acc[{h * tn + c}] = acc[{h * tn + c}] + a{h} * w{c // wl}{lanes[c % wl]};"
                for h in range(hs) for c in range(tn)]
        fma.append("        }")
    store = [f"    store4(g, split, t.m0 + tx * 4u + {64 * h}u, o0 + ty * TN + {c}u, acc[{h * tn + c}]);"
             for h in range(hs) for c in range(tn)]
    return {"BM": bm, "BN": bn, "CB": cb, "TN": tn, "WL": wl, "W_TYPE": W_TYPES[wl],
            "A_VECS": 2 * bk * bm // 4, "W_VECS": 2 * bk * bn // wl, "ACC": hs * tn,
            "SETUP": "\n".join(setup), "REGS": "\n".join(regs), "LOAD": "\n".join(load),
            "STAGE": "\n".join(stage), "FMA": "\n".join(fma), "STORE": "\n".join(store),
            "NEXT": "c0 = c_begin + (s + 1u) * CB;"}


def wanted_splits(dims: dict[str, int], shared_limit: int = SHARED_BYTES) -> int:
    """K chunks for the ConvParams sizes ``dims`` (1: no split): a deep conv fills one wave, another
    small grid is brought near SPLIT_TARGET workgroups."""
    pl = plan(dims, shared_limit)
    if FORCE_SPLITS is not None:
        return max(1, min(FORCE_SPLITS, pl.steps))
    most = pl.steps // math.ceil(SPLIT_MIN_K / pl.bk)
    if pl.deep or pl.wide:
        return max(1, min(WAVE // pl.workgroups, most, SPLIT_MAX))
    if pl.workgroups >= SPLIT_BELOW:
        return 1
    return max(1, min(math.ceil(SPLIT_TARGET / pl.workgroups), most, SPLIT_MAX))


def split_scratch_bytes(dims: dict[str, int]) -> int:
    """Scratch the partial sums of the wanted split take (0 without a split), on any device: the
    most of the splits on 16 KiB of workgroup memory and on as much as a tile can use."""
    splits = max(wanted_splits(dims), wanted_splits(dims, 1 << 20))
    return 0 if splits == 1 else 4 * splits * dims["total"]


def _splits(ctx: LowerCtx, dims: dict[str, int]) -> int:
    """wanted_splits, bounded by the scratch ``ctx.scratch`` offers inside this step's binding."""
    base, size = ctx.scratch
    if base < ctx.window_base or base + size > ctx.window_base + ctx.window_size:
        return 1
    return max(1, min(wanted_splits(dims, ctx.facts.max_workgroup_storage), size // (4 * dims["total"])))


def gemm_steps(node: Node, ctx: LowerCtx, fields: dict[str, int], subs: dict[str, object]) -> list[Step]:
    """The implicit GEMM over ``fields`` (ConvParams but m_start and the split): one dispatch per run of
    65535 row tiles (grid z = groups x K splits), then conv_split_sum when K is split."""
    pl = plan(fields, ctx.facts.max_workgroup_storage)
    splits = _splits(ctx, fields)
    chunk_steps = math.ceil(pl.steps / splits)
    chunk = pl.unit * chunk_steps  # input channels (conv_gemm_taps) or k (conv_gemm) per split
    splits = math.ceil((fields["c_in_g"] if pl.taps else fields["kdim"]) / chunk)  # no empty split
    if chunk_steps > LOOP_BUDGET:
        raise LimitError(f"{where(node)}: the implicit GEMM would run {chunk_steps} K steps in one GPU "
                         f"thread, more than the {LOOP_BUDGET} allowed (K = {fields['kdim']}; lavapipe stops "
                         "at 65535)")
    part = (ctx.scratch[0] - ctx.window_base) // 4 if splits > 1 else 0
    fields = {**fields, "splits": splits, "k_chunk": chunk, "part": part}
    if pl.taps:
        gemm, subs = CONV_GEMM_TAPS, {**subs, **taps_blocks(pl)}
    else:
        runs = fields["c_in_g"] % pl.bk == 0
        gemm = CONV_GEMM
        cin_g = "p.c_in_g" if runs else f"{fields['c_in_g']}u"
        subs = {**subs, **blocks(pl.bm, pl.bn, runs, pl.bk), "CIN_G": cin_g}
    row_tiles = math.ceil(fields["m"] / pl.bm)
    n_tiles = math.ceil(fields["c_out_g"] / pl.bn)
    groups = fields["groups"]
    out = [ctx.dispatch(gemm, node, (min(MAX_GROUPS, row_tiles - start), n_tiles, groups * splits), subs,
                        False, m_start=start * pl.bm, **fields)
           for start in range(0, row_tiles, MAX_GROUPS)]
    if splits > 1:
        out.append(ctx.dispatch(CONV_SPLIT_SUM, node, ctx.grid_1d(fields["total"]), {"EXPR": subs["EXPR"]},
                                False, m_start=0, **fields))
    return out

"""FFT plans on the GPU: lines of a transform as passes of one kernel, signal_fft_lines.

A transform of length N runs the length M = ops.signal.fft_plan_length(N) (N itself when its prime
factors are 2, 3, 5, 7, else Bluestein's power of two m >= 2N - 1). When M points fit one workgroup
(``capacity``: the workgroup memory in points of 8 bytes, 2048 in WebGPU's minimum of 16 KiB; at least
4096 on an H100) one dispatch does it all: load, the stages in registers, (Bluestein: times the kernel's
spectrum, the inverse stages), store. So does a longer power of two of at most 16 points per invocation
(``rounds_shape_for``: 2^14 on 1024 invocations), one line per workgroup, each exchange in rounds of as
many points as the workgroup memory holds. A longer M runs as four-step passes M = n1 * n2 through arena
scratch: FFTs of the n2 strided columns of length n1, twisted by w_M^(column * frequency), then FFTs of
the n1 rows of length n2, stored transposed (the transpose is the passes' addressing); Bluestein doubles
that (forward, times the kernel, inverse). Each pass reads and writes the data once: 2 passes for
2^20 = 1024 x 1024. The inverse transform is conj(forward(conj(x))), so one plan table (ops/signal.py,
a Constant input) serves both directions.

A pass reads its lines through a *loader* (complex, real, hermitian for irfft, frame for Stft) and
writes them through a *store* (complex, real), each addressed by a ``Lines`` record: where line b and
its element t live in words, so one kernel reads any axis, the c64 and block layouts, and the scratch
between passes. A variant (one shader) is a line length with its lines per workgroup and lane order
(``signal_fft_code.Shape``: the stages as straight-line code), a loader, a store and its epilogue steps
(chirp, twist); the rest (offsets, strides, conj, scale) are uniform fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlxpy.errors import LimitError, where
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import FftNorm
from rlxpy.ir.ops.signal import fft_plan_length
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.lowering import signal_fft_code
from rlxpy.wgpu_backend.lowering.signal_fft_code import Shape, body, line_threads, rounds_shape, shape_for
from rlxpy.wgpu_backend.schedule import DeviceFacts, LowerCtx, Step

_LINES = ("base", "inner", "outer", "inner_w", "elem", "im")
FFT_FIELDS = {
    **{name: U32 for name in ("rows", "sub_rows", "t_sub", "t_k", "o_sub", "o_k", "load_len", "out_len",
                              "table", "tw_scale", "twist_mask", "n_full", "bins", "pad", "pad_mode",
                              "window", "conj_in", "pre", "mid", "conj_a", "post", "conj_b", "in_line0",
                              "out_line0")},
    **{f"in_{name}": U32 for name in _LINES},
    **{f"out_{name}": U32 for name in _LINES},
    "scale": F32,
}
SIGNAL_FFT_LINES = kernel(
    "signal_fft_lines", params("SignalFftLinesParams", **FFT_FIELDS),
    dtypes=accepts((DType.F32, DType.C64), DType.F32, DType.F32, out=(DType.F32, DType.C64)),
    shared_bytes=lambda s: 8 * int(s["SHARED"]), sizes={"SHARED": 16})

#: Loader and store functions (include/signal_fft_lines_io.wgsl); "complex" moves 8-byte pairs where the
#: words allow, else word by word.
LOADERS = {"complex": "load_complex", "real": "load_real", "hermitian": "load_hermitian_at",
           "frame": "load_frame_at", "complex_words": "load_complex_words"}
STORES = {"complex": "store_complex", "real": "store_real", "complex_words": "store_complex_words"}
#: The workgroup budget variants are shaped for, when below the device's limits: points of workgroup memory
#: and invocations (None: the device's). A line longer than the points still runs in one workgroup, alone.
#: Smaller workgroups than a big GPU allows measured faster (more of them resident per SM; H200, with
#: MAX_RADIX 8: 2^10 x 4096 0.084 -> 0.059 ms, benches/RESULTS.md).
SHAPE_POINTS: int | None = 2048
SHAPE_INVOCATIONS: int | None = 256
#: Lines side by side a four-step pass wants at least (32-byte runs of adjacent columns in its strided
#: reads and writes): its stages take the smallest power-of-two radix from MAX_RADIX up to 16 that leaves
#: room for them in the workgroup (a 1024-point line: radix 16, 64 invocations per line, 4 lines; H200,
#: 2^20 x 4: 0.193 -> 0.142 ms against radix 4 throughout); PASS_MAX_RADIX, when set, instead. More lines
#: with larger radices measured slower on an H100 (32 lines of 128 points, radix 16 x 8, 256-byte runs:
#: 2^14 x 256 0.101 -> 0.203 ms; 16 lines, radix 8: 0.118; benches/RESULTS.md).
PASS_MIN_LINES = 4
PASS_MAX_RADIX: int | None = None
#: Invocations a four-step pass over lines of at least PASS_WIDE_FROM points may use, below the device's
#: limit (None: as the other variants, SHAPE_INVOCATIONS). More invocations leave each fewer points: a
#: 1024-point line at 1024 takes radix 4 (256 invocations per line, 4 lines) instead of radix 16 (64 per
#: line) at 256, fewer registers per invocation. H100, 2^20 x 4: 0.151 -> 0.139 ms (512: 0.143; 1024 with
#: radix 8: 0.200; with ROW_FAST_IN 1 as well: 0.131, 0.50x cuFFT); the 128-point passes of 2^14 did
#: not change (benches/RESULTS.md).
PASS_INVOCATIONS: int | None = 1024
PASS_WIDE_FROM = 1024
#: Lines per workgroup a four-step pass asks for (adjacent columns: full 32-byte sectors or more), and a
#: single pass (0: as many as the workgroup memory holds).
PASS_LINES, SINGLE_LINES = 16, 0
#: Adjacent lines among the invocations (at most the workgroup's lines): columns (reads and writes
#: strided), rows stored transposed. Rows: 16 measured faster than 4 and 8 on the H200 (longer runs of the
#: transposed stores outweigh shorter runs of the reads; 2^14 x 256: 0.099 -> 0.092 ms, benches/RESULTS.md).
#: ROW_FAST_IN, when below ROW_FAST, regroups a row pass: its lines load ROW_FAST_IN side by side (1: each
#: line's points adjacent, one contiguous run) and store ROW_FAST side by side (the exchange before the
#: last stage regroups the invocations). 1 against 16 on an H100, the row passes: 2^14 x 256 0.049 ->
#: 0.044 ms, 2^20 x 4 0.068 -> 0.062, 4099 x 255's 0.026 -> 0.024 (benches/RESULTS.md).
COLUMN_FAST, ROW_FAST, ROW_FAST_IN = 16, 16, 1
#: A line of a power-of-two length longer than the workgroup memory holds, up to ROUNDS_POINTS points per
#: invocation of ROUNDS_INVOCATIONS (below the device's limit), runs in one pass, one line per workgroup:
#: its exchanges go through workgroup memory ROUNDS_CHUNK points at a time (whole blocks of 256; None: the
#: largest power of two the memory holds, 4096 on an H100), stages of radix up to ROUNDS_RADIX. It reads
#: and writes the data once where four-step passes move it twice. H100, against four-step passes:
#: 2^14 x 256 0.096 -> 0.060 ms, 2^13 x 512 0.092 -> 0.073, 4099 x 255 (Bluestein m = 16384) 0.183 ->
#: 0.090. Slower there: rounds of 2048 points (2^14: 0.093) or 6144 (the whole 48 KiB, 3 rounds: 0.062,
#: 4099: 0.137), radix 8 (0.068) or 4 (0.085), 512 invocations of 32 points, radix 32 (0.079; 4099
#: faster, 0.079, but its shader compiles 3x slower on lavapipe), 2^13 on 1024 invocations of 8 points
#: (0.082) (benches/RESULTS.md). A switch for A/B runs (ROUNDS_LINES).
ROUNDS_LINES = True
ROUNDS_INVOCATIONS, ROUNDS_POINTS, ROUNDS_RADIX = 1024, 16, 16
ROUNDS_CHUNK: int | None = None
#: Four-step passes may take such lines too (a switch for A/B runs): 0 no, 1 the rows (2^20 = 64 x 16384:
#: 64-point columns, then 16384-point rows stored transposed), 2 the columns (16384 x 64). Slower on an
#: H100, 2^20 x 4: 0.130 ms -> 0.179 (1: the rows' stores 512 B apart, 0.134) and 0.194 (2: the
#: columns' loads, 0.154), so off.
ROUNDS_SPLIT = 0
#: A four-step twist reads roots[e] directly up to this plan length, beyond as two factors from slices.
TWIST_DIRECT = 4096
#: Most arena scratch (words, 32 MiB) a multi-pass transform asks for; more lines run in chunks.
SCRATCH_WORDS = 8 << 20


@dataclass(frozen=True)
class Lines:
    """Where element t of line b lives: word ``base + (b // inner) * outer + (b % inner) * inner_w +
    t * elem`` (the imaginary part ``im`` words further)."""

    base: int
    inner: int = 1
    outer: int = 0
    inner_w: int = 0
    elem: int = 2
    im: int = 1

    def fields(self, prefix: str) -> dict[str, int]:
        return {f"{prefix}_{name}": getattr(self, name) for name in _LINES}


def axis_lines(base: int, shape: tuple[int, ...], axis: int, complex_words: bool, im: int = 1) -> Lines:
    """Lines along ``axis`` of a contiguous tensor (c64: 2 words per element, f32: 1)."""
    words = 2 if complex_words else 1
    inner = math.prod(shape[axis + 1:])
    return Lines(base, inner, words * shape[axis] * inner, words, words * inner, im if complex_words else 0)


@dataclass
class Source:
    """The first pass's loader: its include, its lines and its extra fields (frame / hermitian)."""

    load: str
    lines: Lines
    extra: dict[str, int] = field(default_factory=dict)


def capacity(facts: DeviceFacts) -> int:
    """Points of 8 bytes the workgroup memory holds (a multiple of 16, the swizzle's unit)."""
    return facts.max_workgroup_storage // 8 // 16 * 16


def fits(length: int, facts: DeviceFacts) -> bool:
    """Does one workgroup transform a line of ``length`` points?"""
    return length <= capacity(facts) and line_threads(length) <= facts.max_invocations


def rounds_shape_for(length: int, facts: DeviceFacts, bluestein: bool = False) -> Shape | None:
    """The one-pass variant of a line longer than the workgroup memory (ROUNDS_*), None where the line
    fits one workgroup's memory, is no power of two, or needs more points per invocation."""
    points = capacity(facts)
    invocations = min(facts.max_invocations, ROUNDS_INVOCATIONS)
    invocations = 1 << (invocations.bit_length() - 1)
    chunk = min(points, ROUNDS_CHUNK or 1 << (points.bit_length() - 1)) // 256 * 256
    if (not ROUNDS_LINES or length & (length - 1) or length <= points or chunk < 256
            or length > ROUNDS_POINTS * invocations):
        return None
    threads = min(invocations, length // ROUNDS_POINTS)  # a shorter line: ROUNDS_POINTS points each still
    return rounds_shape(length, threads, chunk, ROUNDS_RADIX, bluestein)


def split(length: int, facts: DeviceFacts) -> tuple[int, int] | None:
    """(n1, n2) with n1 * n2 = length, both fitting one workgroup, as balanced as possible; None when
    none exists."""
    best = None
    for n1 in range(2, capacity(facts) + 1):
        if length % n1 == 0 and fits(n1, facts) and fits(length // n1, facts):
            if best is None or abs(math.log(n1 / (length // n1))) < abs(math.log(best[0] / best[1])):
                best = (n1, length // n1)
    return best


def scale_of(n: int, inverse: bool, norm: FftNorm) -> float:
    if norm is FftNorm.ORTHO:
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm is FftNorm.FORWARD and inverse) else 1.0


@dataclass
class FftJob:
    """A transform of ``lines`` lines of length ``n`` from ``source`` to ``target`` (a store include and
    its lines; ``out_len`` outputs kept per line), read back in the right direction and scaled."""

    node: Node
    table: Node
    n: int
    lines: int
    source: Source
    store: str
    target: Lines
    out_len: int
    inverse: bool
    scale: float


def line_words(n: int, facts: DeviceFacts) -> int:
    """Arena scratch (words) one line of a length-n transform needs: 0 when it runs in one pass."""
    length = fft_plan_length(n)
    if fits(length, facts) or rounds_shape_for(length, facts):
        return 0
    return (1 if length == n else 2) * 2 * length  # four-step: one c64 buffer, Bluestein: two


def scratch_words(n: int, lines: int, facts: DeviceFacts) -> int:
    """Arena scratch (words) to ask for: every line at once, or chunks of lines in SCRATCH_WORDS."""
    per_line = line_words(n, facts)
    return min(per_line * lines, max(per_line, SCRATCH_WORDS))


def fft_steps(job: FftJob, ctx: LowerCtx) -> list[Step]:
    """The dispatches of one transform: one pass, or four-step passes through ``ctx.scratch``, as many
    lines at a time as the scratch offered holds."""
    n, node = job.n, job.node
    length = fft_plan_length(n)
    bluestein = length != n
    table = ctx.offset(job.table)
    assert table % 2 == 0, f"plan table of {node.name} at odd word {table}"  # arena allocations: 256 B
    chirp, kernel_spectrum = (table + 2 * length) // 2, (table + 2 * length + 2 * n) // 2  # in pairs
    rounds = rounds_shape_for(length, ctx.facts, bluestein)
    if fits(length, ctx.facts) or rounds:
        fields = {"conj_in": int(job.inverse), "load_len": n, "out_len": job.out_len,
                  "conj_b": int(job.inverse), "scale": job.scale}
        if bluestein:
            fields.update(has_pre=1, pre=chirp, mid=kernel_spectrum, conj_a=1, has_post=1, post=chirp)
        fast = 1 if job.source.lines.inner == 1 else COLUMN_FAST  # lines along another axis: adjacent
        shape = rounds or shape_for(length, *_budget(ctx.facts), SINGLE_LINES, fast, bluestein)
        return [_pass(ctx, job, shape, job.lines, 1, (0, 1), (0, 1), job.source, job.store, job.target,
                      fields)]
    halves = _rounds_split(length, ctx.facts) or split(length, ctx.facts)
    if halves is None:
        raise LimitError(f"{where(node)}: an FFT of length {length} splits into no two factors of at most "
                         f"{capacity(ctx.facts)} points (the workgroup memory)")
    n1, n2 = halves
    per_line = line_words(n, ctx.facts)
    base, size = ctx.scratch
    chunk = min(job.lines, size // 4 // per_line) if base >= ctx.window_base else 0
    if chunk == 0:
        raise LimitError(f"{where(node)}: an FFT of length {length} needs {4 * per_line} B of arena scratch "
                         f"per line, {size} B are free in its binding")
    first = (base - ctx.window_base) // 4
    second = first + 2 * length * chunk
    scratch = [Lines(first, outer=2 * length), Lines(second, outer=2 * length)]
    scratch_source = [Source("complex", lines) for lines in scratch]
    col_budget, row_budget = _pass_budget(ctx.facts, n1), _pass_budget(ctx.facts, n2)
    column_shape = rounds_shape_for(n1, ctx.facts) or shape_for(
        n1, *col_budget, PASS_LINES, COLUMN_FAST, max_radix=_pass_radix(n1, col_budget[1]))
    row_shape = rounds_shape_for(n2, ctx.facts) or shape_for(
        n2, *row_budget, PASS_LINES, ROW_FAST_IN, max_radix=_pass_radix(n2, row_budget[1]), fast_out=ROW_FAST)
    twist = {"twiddle": 1, "twist_mask": (length - 1) >> ((length.bit_length() - 1) // 2)
             if length > TWIST_DIRECT and length & (length - 1) == 0 else 0}

    def columns(lines: int, source: Source, out: Lines, fields: dict) -> Step:
        """FFTs of the n2 columns (t = j1 n2 + column), twisted, stored as row j1 of the scratch."""
        return _pass(ctx, job, column_shape, lines * n2, n2, (1, n2), (1, n2), source, "complex", out,
                     {**twist, "out_len": length, **fields})

    def rows(lines: int, source: Source, store: str, out: Lines, fields: dict) -> Step:
        """FFTs of the n1 scratch rows, stored transposed (frequency k1 + n1 k2)."""
        return _pass(ctx, job, row_shape, lines * n1, n1, (n2, 1), (1, n1), source, store, out,
                     {"load_len": length, **fields})

    steps = []
    for line0 in range(0, job.lines, chunk):  # lines line0.. of the node; the scratch holds them from 0
        lines = min(chunk, job.lines - line0)
        first_pass = {"in_line0": line0, "load_len": n, "conj_in": int(job.inverse)}
        last_pass = {"out_line0": line0, "out_len": job.out_len, "conj_b": int(job.inverse),
                     "scale": job.scale}
        if not bluestein:
            steps += [columns(lines, job.source, scratch[0], first_pass),
                      rows(lines, scratch_source[0], job.store, job.target, last_pass)]
            continue
        steps += [columns(lines, job.source, scratch[0], {**first_pass, "has_pre": 1, "pre": chirp}),
                  rows(lines, scratch_source[0], "complex", scratch[1],
                       {"out_len": length, "has_post": 1, "post": kernel_spectrum}),
                  columns(lines, scratch_source[1], scratch[0], {"load_len": length, "conj_in": 1}),
                  rows(lines, scratch_source[0], job.store, job.target,
                       {**last_pass, "conj_a": 1, "has_post": 1, "post": chirp})]
    return steps


def _rounds_split(length: int, facts: DeviceFacts) -> tuple[int, int] | None:
    """(n1, n2) with the longest factor that runs as one workgroup per line (ROUNDS_SPLIT), None when
    off or none exists."""
    if not ROUNDS_SPLIT or length & (length - 1):
        return None
    big = ROUNDS_POINTS * ROUNDS_INVOCATIONS
    while big > 1 and not (length % big == 0 and rounds_shape_for(big, facts) and fits(length // big, facts)):
        big //= 2
    if big == 1:
        return None
    return (length // big, big) if ROUNDS_SPLIT == 1 else (big, length // big)


def _budget(facts: DeviceFacts) -> tuple[int, int]:
    """(points, invocations) a workgroup of a variant may use: the device's, or SHAPE_* below them."""
    points, invocations = capacity(facts), facts.max_invocations
    return min(points, SHAPE_POINTS or points), min(invocations, SHAPE_INVOCATIONS or invocations)


def _pass_budget(facts: DeviceFacts, length: int) -> tuple[int, int]:
    """The workgroup budget of a four-step pass over lines of ``length`` points: _budget's, with
    PASS_INVOCATIONS invocations (below the device's limit) for lines of at least PASS_WIDE_FROM."""
    points, invocations = _budget(facts)
    if PASS_INVOCATIONS and length >= PASS_WIDE_FROM:
        invocations = min(facts.max_invocations, PASS_INVOCATIONS)
    return points, invocations


def _pass_radix(length: int, invocations: int) -> int:
    """The largest radix of a four-step pass's stages (PASS_MIN_LINES)."""
    if PASS_MAX_RADIX:
        return PASS_MAX_RADIX
    radix = signal_fft_code.MAX_RADIX
    while radix < 16 and line_threads(length, radix) * PASS_MIN_LINES > invocations:
        radix *= 2
    return radix


def _pairs(lines: Lines) -> bool:
    """Are the complex elements of ``lines`` 8-byte pairs at even words (one load or store each)?"""
    return lines.im == 1 and all(v % 2 == 0 for v in (lines.base, lines.outer, lines.inner_w, lines.elem))


def _pass(ctx: LowerCtx, job: FftJob, shape: Shape, rows: int, sub_rows: int, load: tuple[int, int],
          store: tuple[int, int], source: Source, store_kind: str, target: Lines, fields: dict) -> Step:
    """One signal_fft_lines dispatch: ``rows`` lines of ``shape.length`` points; line r is sub-line r %
    sub_rows of batch r // sub_rows, loaded from t = sub * load[0] + k * load[1], stored at t = sub *
    store[0] + k * store[1]. ``fields``: uniform values, and the epilogue steps has_pre, twiddle, has_post
    (constants of the variant)."""
    fields = dict(fields)
    load_kind = source.load
    if load_kind == "complex" and not _pairs(source.lines):
        load_kind = "complex_words"
    if store_kind == "complex" and not _pairs(target):
        store_kind = "complex_words"
    plan = fft_plan_length(job.n)
    values = {name: 0 for name in FFT_FIELDS}
    values.update(scale=1.0, rows=rows, sub_rows=sub_rows, t_sub=load[0], t_k=load[1], o_sub=store[0],
                  o_k=store[1], table=ctx.offset(job.table) // 2, tw_scale=plan // shape.length,
                  **source.lines.fields("in"), **target.fields("out"), **source.extra)
    steps = {flag: str(bool(fields.pop(name, 0))).lower()  # epilogue steps: constants of the variant
             for flag, name in (("PRE", "has_pre"), ("TWIST", "twiddle"), ("POST", "has_post"))}
    values.update(fields)
    groups = math.ceil(rows / shape.lines)
    subs = {**shape.subs(_body(shape)), "LOAD": LOADERS[load_kind], "STORE": STORES[store_kind], **steps}
    return ctx.dispatch(SIGNAL_FFT_LINES, job.node, ctx.grid_1d(groups, 1), subs, scalable=False, **values)


_BODIES: dict[Shape, str] = {}


def _body(shape: Shape) -> str:
    """The generated stages of ``shape`` (made once per variant)."""
    if shape not in _BODIES:
        _BODIES[shape] = body(shape)
    return _BODIES[shape]

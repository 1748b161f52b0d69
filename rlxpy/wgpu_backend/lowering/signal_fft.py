"""FFT plans on the GPU: lines of a transform as passes of one kernel, signal_fft_rows.

A transform of length N runs the length M = ops.signal.fft_plan_length(N) (N itself when its prime
factors are 2, 3, 5, 7, else Bluestein's power of two m >= 2N - 1). When M points fit the workgroup
memory (``capacity``: 4096 on a 32 KiB device) one dispatch does it all: load, Stockham stages,
(Bluestein: times the kernel's spectrum, the inverse stages), store. A longer M runs as four-step
passes M = n1 * n2 through arena scratch: FFTs of the n2 strided columns of length n1, twisted by
w_M^(column * frequency), then FFTs of the n1 rows of length n2, stored transposed; Bluestein doubles
that (forward, times the kernel, inverse). The inverse transform is conj(forward(conj(x))), so one plan
table (ops/signal.py, a Constant input) serves both directions.

A pass reads its lines through a *loader* (``load_mode``: complex, real, hermitian for irfft, frame for
Stft) and writes them through a *store* (``store_mode``: complex, real), each addressed by a ``Lines``
record: where line b and its element t live in words, so one kernel reads any axis, the c64 and
block layouts, and the scratch between passes. The modes are uniform fields rather than variants, and
a workgroup holds either 256 points or the device's capacity: two variants in all, as each costs a
shader compile (seconds on lavapipe).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlxpy.errors import LimitError, where
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import FftNorm
from rlxpy.ir.ops.signal import FFT_RADICES, fft_plan_length
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.schedule import DeviceFacts, LowerCtx, Step

_LINES = ("base", "inner", "outer", "inner_w", "elem", "im")
FFT_FIELDS = {
    **{name: U32 for name in ("rows", "per_wg", "len", "stages", "radices0", "radices1", "table", "n_table",
                              "sub_rows", "t_sub", "t_k", "load_len", "n_full", "bins", "pad", "pad_mode",
                              "window", "conj_in", "has_pre", "pre", "twiddle", "has_mid", "mid", "o_sub",
                              "o_k", "out_len", "conj_a", "has_post", "post", "conj_b",
                              "load_lines_fastest", "store_lines_fastest", "load_mode", "store_mode",
                              "in_line0", "out_line0")},
    **{f"in_{name}": U32 for name in _LINES},
    **{f"out_{name}": U32 for name in _LINES},
    "scale": F32,
}
SIGNAL_FFT_ROWS = kernel(
    "signal_fft_rows", params("SignalFftRowsParams", **FFT_FIELDS),
    dtypes=accepts((DType.F32, DType.C64), DType.F32, DType.F32, out=(DType.F32, DType.C64)),
    shared_bytes=lambda s: 16 * int(s["CAP"]), sizes={"CAP": 64})

#: Largest number of points one workgroup transforms (two halves of 8 bytes per point of workgroup memory).
MAX_CAPACITY = 4096
#: Points of the small variant (short lines, several per workgroup); longer ones use the capacity.
SMALL_POINTS = 256
LOAD_MODES = {"complex": 0, "real": 1, "hermitian": 2, "frame": 3}
STORE_MODES = {"complex": 0, "real": 1}
#: Radix-4 stages first, then one radix 2, then 3, 5, 7 (each 4 bits of radices0/radices1).
MAX_STAGES = 16
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


def radices(length: int) -> list[int]:
    """Stage radices of a 7-smooth length: 4s, at most one 2, then 3s, 5s, 7s."""
    out, rest = [], length
    while rest % 4 == 0:
        out.append(4)
        rest //= 4
    for r in FFT_RADICES:
        while rest % r == 0:
            out.append(r)
            rest //= r
    assert rest == 1, f"{length} is not 7-smooth"
    return out


def capacity(facts: DeviceFacts) -> int:
    """Points per workgroup: the largest power of two of 16 bytes each the device allows, up to 4096."""
    cap = MAX_CAPACITY
    while cap > 64 and 16 * cap > facts.max_workgroup_storage:
        cap //= 2
    return cap


def split(length: int, cap: int) -> tuple[int, int] | None:
    """(n1, n2) with n1 * n2 = length, both <= cap, as balanced as possible; None when none exists."""
    best = None
    for n1 in range(2, cap + 1):
        if length % n1 == 0 and length // n1 <= cap:
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
    if length <= capacity(facts):
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
    chirp, kernel_spectrum = table + 2 * length, table + 2 * length + 2 * n
    cap = capacity(ctx.facts)
    if length <= cap:
        fields = {"conj_in": int(job.inverse), "load_len": n, "out_len": job.out_len,
                  "conj_b": int(job.inverse), "scale": job.scale}
        if bluestein:
            fields.update(has_pre=1, pre=chirp, has_mid=1, mid=kernel_spectrum, conj_a=1, has_post=1,
                          post=chirp)
        return [_pass(ctx, job, job.lines, length, 1, (0, 1), (0, 1), job.source, job.store, job.target,
                      fields)]
    halves = split(length, cap)
    if halves is None:
        raise LimitError(f"{where(node)}: an FFT of length {length} splits into no two factors of at most "
                         f"{cap} points (the workgroup memory)")
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

    def columns(lines: int, source: Source, out: Lines, fields: dict) -> Step:
        """FFTs of the n2 columns (t = j1 n2 + column), twisted, stored as row j1 of the scratch."""
        return _pass(ctx, job, lines * n2, n1, n2, (1, n2), (1, n2), source, "complex", out,
                     {"twiddle": 1, "out_len": length, **fields}, lines_fastest=(True, True))

    def rows(lines: int, source: Source, store: str, out: Lines, fields: dict) -> Step:
        """FFTs of the n1 scratch rows, stored transposed (frequency k1 + n1 k2)."""
        return _pass(ctx, job, lines * n1, n2, n1, (n2, 1), (1, n1), source, store, out,
                     {"load_len": length, **fields}, lines_fastest=(False, True))

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


def _pass(ctx: LowerCtx, job: FftJob, rows: int, length: int, sub_rows: int, load: tuple[int, int],
          store: tuple[int, int], source: Source, store_kind: str, target: Lines, fields: dict,
          lines_fastest: tuple[bool, bool] = (False, False)) -> Step:
    """One signal_fft_rows dispatch: ``rows`` lines of ``length`` points; line r is sub-line r %
    sub_rows of batch r // sub_rows, loaded from t = sub * load[0] + k * load[1], stored at t = sub *
    store[0] + k * store[1]."""
    cap = capacity(ctx.facts)
    stages = radices(length)
    if len(stages) > MAX_STAGES:
        raise LimitError(f"{where(job.node)}: {len(stages)} FFT stages of length {length} "
                         f"(at most {MAX_STAGES})")
    slots = SMALL_POINTS if length <= SMALL_POINTS and not lines_fastest[0] else cap
    per_wg = max(1, min(rows, slots // length))
    lanes = 64 if slots == SMALL_POINTS else 256
    packed = [0, 0]
    for s, r in enumerate(stages):
        packed[s // 8] |= r << (4 * (s % 8))
    values = {name: 0 for name in FFT_FIELDS}
    values.update(scale=1.0, rows=rows, per_wg=per_wg, len=length, stages=len(stages), radices0=packed[0],
                  radices1=packed[1], table=ctx.offset(job.table), n_table=fft_plan_length(job.n),
                  sub_rows=sub_rows, t_sub=load[0], t_k=load[1], o_sub=store[0], o_k=store[1],
                  load_lines_fastest=int(lines_fastest[0]), store_lines_fastest=int(lines_fastest[1]),
                  load_mode=LOAD_MODES[source.load], store_mode=STORE_MODES[store_kind],
                  **source.lines.fields("in"), **target.fields("out"), **source.extra)
    values.update(fields)
    subs = {"WG": lanes, "CAP": slots, "SLOTS": 2 * slots}
    groups = math.ceil(rows / per_wg)
    return ctx.dispatch(SIGNAL_FFT_ROWS, job.node, ctx.grid_1d(groups, 1), subs, scalable=False, **values)

"""The shape of a signal_fft_lines variant and the WGSL of its stages (straight-line code).

A variant transforms lines of ``length`` points, a compile-time constant: ``threads`` invocations per
line, ``lines`` lines per workgroup. Stage s (radix r, span ns = the product of the earlier radices)
is Stockham's: butterfly j < length / r reads points j + q * length / r, twists them by
w_{ns r}^(q k) (k = j mod ns; roots from the plan table), takes their r-point DFT in registers and
gives points (j - k) r + k + q ns. Invocation t of a line owns butterflies t + b * threads, so the first
stage reads and the last stage writes points t + i * threads of global memory (coalesced), and the
points between two stages go through workgroup memory: written, barrier, read, barrier. When the
workgroup memory holds fewer lines than the workgroup (``group`` < ``lines``), the exchange runs in
rounds of ``group`` lines. Points in workgroup memory are swizzled (the low 4 bits of the index XOR
the bit-reversed next 4) so that the strided writes of the early stages hit distinct banks; when lines
sit side by side among the invocations (``fast`` > 1, as in the four-step passes) their slots are one
line length apart, which the swizzle does not tell apart, so the low 4 bits also XOR the line
(``line_xor``). A line longer than the workgroup memory (``chunk``: one line per workgroup) exchanges
in rounds of ``chunk`` points: round g writes and reads the line's points g * chunk up to (g + 1) *
chunk (``_Stages.exchange_chunks``). The last stage may group the invocations differently
(``fast_out``): its exchange is written by line and point, so any invocation can read any line's
points (a four-step row pass can load each line's points adjacent and store the lines side by side).
``PREFETCH_ROOTS`` loads each stage's roots (one table load per butterfly) up front with the first
stage's points.

Everything here is straight-line code with constant indices (no arrays that the driver could move to
local memory); the r-point DFTs are built recursively: 2, 4 by hand, 3, 5, 7 by the symmetric direct
formula, composites by Cooley-Tukey with constant twiddles (f64 values rounded to f32 literals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Largest power-of-two radix of a stage (the registers of one butterfly): 4 measured faster than 8 and
#: 16 on the H200 for lines in one pass (fewer registers and workgroup memory per workgroup, more of them
#: resident; benches/RESULTS.md); the four-step passes may take more (signal_fft.PASS_MIN_LINES).
MAX_RADIX = 4
#: Spread the slots of side-by-side lines over the banks (``Shape.line_xor``); a switch for A/B runs.
LINE_XOR = True
#: Load every stage's root of unity (one per butterfly) right after the first stage's points, instead of
#: in its stage (the table loads then wait alongside the data rather than after a barrier). Measured mixed
#: on an H100, so off: 2^14 x 256 0.0996 -> 0.0970 ms, but 2^20 x 4 0.151 -> 0.173, 2^10 x 4096 0.0458 ->
#: 0.0471 (benches/RESULTS.md); a switch for A/B runs.
PREFETCH_ROOTS = False


def stage_radices(length: int, max_radix: int | None = None) -> tuple[int, ...]:
    """Radices of a 7-smooth length: ``max_radix`` (a power of two; default MAX_RADIX) as often as it
    divides, 9s, then 2^k, 3, 5, 7, the smallest pairs merged while their product is <= max_radix;
    largest first."""
    max_radix = max_radix or MAX_RADIX
    rest, out = length, []
    twos = 0
    while rest % 2 == 0:
        rest //= 2
        twos += 1
    bits = max_radix.bit_length() - 1
    out += [max_radix] * (twos // bits) + ([1 << (twos % bits)] if twos % bits else [])
    threes = 0
    while rest % 3 == 0:
        rest //= 3
        threes += 1
    out += [9] * (threes // 2) + [3] * (threes % 2)
    for prime in (5, 7):
        while rest % prime == 0:
            rest //= prime
            out.append(prime)
    assert rest == 1, f"{length} is not 7-smooth"
    out.sort()
    while len(out) >= 2 and out[0] * out[1] <= max_radix:
        out = sorted([out[0] * out[1], *out[2:]])
    return tuple(sorted(out, reverse=True))


@dataclass(frozen=True)
class Shape:
    """One variant: ``lines`` lines of ``length`` points per workgroup, ``threads`` invocations each;
    ``group`` lines at a time in workgroup memory; ``fast`` lines adjacent among the invocations (1:
    the points of a line are; more: the same point of adjacent lines, for lines adjacent in memory) in
    every stage but the last, ``fast_out`` in the last (the exchange before it regroups the invocations:
    a pass that reads contiguous lines and stores them transposed reads with 1 and stores with many);
    ``bluestein``: forward transform, times the kernel spectrum, conj, forward transform again."""

    length: int
    radices: tuple[int, ...]
    threads: int
    lines: int
    group: int
    fast: int
    bluestein: bool = False
    fast_out: int = 0  # 0: fast
    chunk: int = 0  # > 0: one line longer than the workgroup memory, exchanged ``chunk`` points a round

    @property
    def invocations(self) -> int:
        return self.lines * self.threads

    @property
    def shared_points(self) -> int:
        """Points of workgroup memory (rounded up to the swizzle's 16; at least 16)."""
        if self.chunk:
            return self.chunk
        return max(16, -(-self.group * self.length // 16) * 16)

    @property
    def line_xor(self) -> bool:
        """Do the slots of lines side by side XOR their line into the swizzle? Where several share the
        exchange and each slot is whole blocks of 16 points (the XOR then stays inside the slot)."""
        return (LINE_XOR and max(self.fast, self.store_fast) > 1 and self.group > 1
                and self.length % 16 == 0)

    @property
    def store_fast(self) -> int:
        """Lines adjacent among the invocations in the last stage (the one that stores)."""
        return self.fast_out or self.fast

    def subs(self, body: str) -> dict[str, object]:
        return {"WG": self.invocations, "SHARED": self.shared_points, "LINES": self.lines,
                "LINE_XOR": f"(line % {self.group}u) & 15u" if self.line_xor else "0u",
                "THREADS": self.threads, "GROUP": self.group, "FAST": self.fast,
                "FAST_OUT": self.store_fast, "LEN": self.length, "BODY": body}


def line_threads(length: int, max_radix: int | None = None) -> int:
    """Invocations per line: one butterfly each in the largest-radix stage."""
    radices = stage_radices(length, max_radix)
    return length // max(radices) if radices else 1


def shape_for(length: int, capacity: int, invocations: int, lines_wanted: int, fast: int,
              bluestein: bool = False, max_radix: int | None = None, fast_out: int | None = None) -> Shape:
    """A variant for lines of ``length`` points: ``capacity`` points of workgroup memory, at most
    ``invocations`` per workgroup, about ``lines_wanted`` lines per workgroup (more than the memory
    holds: exchanges in rounds), up to ``fast`` of them adjacent among the invocations (``fast_out`` in
    the last stage, where there is an exchange before it; default ``fast``); stages of radix at most
    ``max_radix`` (default MAX_RADIX)."""
    radices = stage_radices(length, max_radix)
    threads = line_threads(length, max_radix)
    group = max(1, min(capacity // length, invocations // threads))
    lines = max(1, min(invocations // threads, max(group, lines_wanted)))
    lines = lines // group * group if lines >= group else lines
    group = min(group, lines)
    fast = _divisor_at_most(fast, lines)
    single = len(radices) < 2 and not bluestein  # no exchange to regroup at
    out = fast if fast_out is None or single else _divisor_at_most(fast_out, lines)
    return Shape(length, radices, threads, lines, group, fast, bluestein, 0 if out == fast else out)


def rounds_shape(length: int, invocations: int, chunk: int, max_radix: int | None = None,
                 bluestein: bool = False) -> Shape:
    """A variant for one line of ``length`` points (a power of two) per workgroup of ``invocations``
    invocations, longer than the workgroup memory: each exchange runs in rounds of ``chunk`` points (whole
    blocks of 256, the swizzle's) of the line (module docstring)."""
    assert length & (length - 1) == 0 and chunk % 256 == 0 and 256 <= chunk < length
    return Shape(length, stage_radices(length, max_radix), invocations, 1, 1, 1, bluestein, chunk=chunk)


def _divisor_at_most(fast: int, lines: int) -> int:
    """The largest divisor of ``lines`` up to ``fast`` (at least 1)."""
    fast = max(1, min(fast, lines))
    while lines % fast:
        fast -= 1
    return fast


def _literal(value: float) -> str:
    """An f32 literal that parses back to the f32 nearest ``value``."""
    text = repr(float(np.float32(value)))
    return ("-" if text.startswith("-") else "") + text.lstrip("-") + "f"


class _Writer:
    """Emits ``let`` lines with fresh names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def let(self, expr: str, indent: str = "    ") -> str:
        name = f"v{self.count}"
        self.count += 1
        self.lines.append(f"{indent}let {name} = {expr};")
        return name

    def raw(self, text: str) -> None:
        self.lines.append(text)

    # -- constant twiddles and small DFTs (forward: w_r = exp(-2 pi i / r)) --------------------------
    def times_root(self, x: str, e: int, r: int) -> str:
        """x * w_r^e, exact where the root is 1, -1 or +-i."""
        e %= r
        if e == 0:
            return x
        if 4 * e == r:
            return self.let(f"vec2<f32>({x}.y, -{x}.x)")
        if 2 * e == r:
            return self.let(f"-{x}")
        if 4 * e == 3 * r:
            return self.let(f"vec2<f32>(-{x}.y, {x}.x)")
        if 8 * e == r:  # (1 - i) / sqrt(2)
            return self.let(f"vec2<f32>({x}.x + {x}.y, {x}.y - {x}.x) * {_literal(math.sqrt(0.5))}")
        if 8 * e == 3 * r:  # (-1 - i) / sqrt(2)
            return self.let(f"vec2<f32>({x}.y - {x}.x, -{x}.x - {x}.y) * {_literal(math.sqrt(0.5))}")
        angle = -2.0 * math.pi * e / r
        return self.let(f"cmul({x}, vec2<f32>({_literal(math.cos(angle))}, {_literal(math.sin(angle))}))")

    def dft(self, xs: list[str]) -> list[str]:
        r = len(xs)
        if r == 1:
            return list(xs)
        if r == 2:
            a, b = xs
            return [self.let(f"{a} + {b}"), self.let(f"{a} - {b}")]
        if r == 4:
            x0, x1, x2, x3 = xs
            a, b = self.let(f"{x0} + {x2}"), self.let(f"{x0} - {x2}")
            d, e = self.let(f"{x1} + {x3}"), self.let(f"{x1} - {x3}")
            return [self.let(f"{a} + {d}"), self.let(f"{b} + vec2<f32>({e}.y, -{e}.x)"),
                    self.let(f"{a} - {d}"), self.let(f"{b} + vec2<f32>(-{e}.y, {e}.x)")]
        first = next((f for f in (4, 2, 3, 5, 7) if r % f == 0 and f < r), None)
        if first is None:
            return self._prime_dft(xs)
        second = r // first
        # r = first * second: input m = second * m1 + m2, output q = q1 + first * q2
        inner = [self.dft([xs[second * m1 + m2] for m1 in range(first)]) for m2 in range(second)]
        out = [""] * r
        for q1 in range(first):
            column = [self.times_root(inner[m2][q1], m2 * q1, r) for m2 in range(second)]
            for q2, value in enumerate(self.dft(column)):
                out[q1 + first * q2] = value
        return out

    def _prime_dft(self, xs: list[str]) -> list[str]:
        """X[q] = A_q -+ i B_q for q, r - q: A_q = x0 + sum cos(2 pi m q / r) (x_m + x_{r-m}),
        B_q = sum sin(2 pi m q / r) (x_m - x_{r-m}), m = 1 .. (r-1)/2."""
        r = len(xs)
        half = (r - 1) // 2
        sums = [self.let(f"{xs[m]} + {xs[r - m]}") for m in range(1, half + 1)]
        diffs = [self.let(f"{xs[m]} - {xs[r - m]}") for m in range(1, half + 1)]
        out = [""] * r
        out[0] = self.let(" + ".join([xs[0], *sums]))
        for q in range(1, half + 1):
            cos_terms = [f"{sums[m - 1]} * {_literal(math.cos(2 * math.pi * m * q / r))}"
                         for m in range(1, half + 1)]
            sin_terms = [f"{diffs[m - 1]} * {_literal(math.sin(2 * math.pi * m * q / r))}"
                         for m in range(1, half + 1)]
            a = self.let(" + ".join([xs[0], *cos_terms]))
            b = self.let(" + ".join(sin_terms))
            out[q] = self.let(f"{a} + vec2<f32>({b}.y, -{b}.x)")
            out[r - q] = self.let(f"{a} - vec2<f32>({b}.y, -{b}.x)")
        return out


def body(shape: Shape) -> str:
    """The stages of ``shape`` as the body of signal_fft_lines' main (after its prologue: ``t``, the
    line's ``slot`` in workgroup memory, its exchange round ``turn``, ``io`` and ``live``)."""
    if not shape.radices:  # length 1: a copy through the epilogue
        return "    if (live) {\n        store_at(io, 0u, load_at(io, 0u));\n    }"
    return _Stages(shape).text()


class _Stages:
    """The straight-line code of a variant's stages (module docstring)."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.w = _Writer()
        stages = [(r, math.prod(shape.radices[:s])) for s, r in enumerate(shape.radices)]
        self.program = stages + stages if shape.bluestein else stages
        self.mid = len(stages) - 1 if shape.bluestein else -1  # the stage the kernel spectrum follows
        self.roots: dict[tuple[int, int, int, str], str] = {}  # (r, ns, b, t): the prefetched root

    def root(self, s: int, b: int) -> str:
        """Stage s's root for butterfly b, w_{ns r}^k = roots[k M / (ns r)] (k = j mod ns): loaded once."""
        r, ns = self.program[s]
        key = (r, ns, b, self.v(s, "t"))
        if key not in self.roots:
            w = self.w
            j = w.let(f"{key[3]} + {b * self.shape.threads}u")
            k = w.let(f"{j} & {ns - 1}u" if ns & (ns - 1) == 0 else f"{j} % {ns}u")
            self.roots[key] = w.let(f"root({k} * {self.shape.length // (ns * r)}u * p.tw_scale)")
        return self.roots[key]

    def v(self, s: int, name: str) -> str:
        """Stage s's name for a per-invocation value (t, io, live, slot, turn, lx): the last stage (after
        an exchange) has its own, of the ``fast_out`` grouping (the kernel's prologue)."""
        return f"{name}_o" if s == len(self.program) - 1 and s > 0 else name

    def butterflies(self, r: int) -> tuple[int, str | None]:
        """Butterflies per invocation in a radix-r stage, and the guard of butterfly b (None: all real)."""
        count = self.shape.length // r
        per = -(-count // self.shape.threads)
        return per, None if per * self.shape.threads == count else f"{{t}} + {{b}}u < {count}u"

    def guard(self, r: int, b: int, s: int) -> str | None:
        """Is butterfly b of the invocation a real one in stage s (radix r)? None: always."""
        _, guard = self.butterflies(r)
        return None if guard is None else guard.format(t=self.v(s, "t"), b=b * self.shape.threads)

    def declare(self, s: int, r: int) -> list[list[str]]:
        """The registers holding stage s's inputs (assigned under guards, so ``var``)."""
        per, _ = self.butterflies(r)
        names = [[f"x{s}_{b}_{q}" for q in range(r)] for b in range(per)]
        for row in names:
            for name in row:
                self.w.raw(f"    var {name} = vec2<f32>();")
        return names

    def block(self, cond: str | None, lines: list[str], indent: str = "    ") -> None:
        if cond is None:
            self.w.lines += [indent + line for line in lines]
            return
        self.w.raw(f"{indent}if ({cond}) {{")
        self.w.lines += [indent + "    " + line for line in lines]
        self.w.raw(f"{indent}}}")

    def text(self) -> str:
        inputs = self.declare(0, self.program[0][0])
        length, threads, r0 = self.shape.length, self.shape.threads, self.program[0][0]
        for b, row in enumerate(inputs):  # stage 0 reads global memory
            guard = self.guard(r0, b, 0)
            self.block("live" if guard is None else f"live && {guard}",
                       [f"{name} = load_at(io, t + {b * threads + q * (length // r0)}u);"
                        for q, name in enumerate(row)])
        if PREFETCH_ROOTS:
            for s, (r, ns) in enumerate(self.program):
                for b in range(self.butterflies(r)[0] if ns > 1 else 0):
                    self.root(s, b)
        for s, (r, ns) in enumerate(self.program):
            outputs = self.stage(s, r, ns, inputs)
            if s == len(self.program) - 1:  # the last stage writes global memory
                live, io = self.v(s, "live"), self.v(s, "io")
                for b, values in enumerate(outputs):
                    guard = self.guard(r, b, s)
                    self.block(live if guard is None else f"{live} && {guard}",
                               [f"store_at({io}, {position}, {value});" for position, value in values])
                break
            inputs = self.exchange(s, r, outputs)
        return "\n".join(self.w.lines)

    def stage(self, s: int, r: int, ns: int, inputs: list[list[str]]) -> list[list[tuple[str, str]]]:
        """Stage s's butterflies: per butterfly b, its outputs as (position in the line, value)."""
        w = self.w
        w.raw(f"    // stage {s}: radix {r}, span {ns}")
        outputs = []
        for b, row in enumerate(inputs):
            j = w.let(f"{self.v(s, 't')} + {b * self.shape.threads}u")
            if ns == 1:
                start, twisted = w.let(f"{j} * {r}u"), list(row)
            else:
                k = w.let(f"{j} & {ns - 1}u" if ns & (ns - 1) == 0 else f"{j} % {ns}u")
                start = w.let(f"({j} - {k}) * {r}u + {k}")
                twisted = [row[0]] + [w.let(f"cmul({row[q]}, {root})") for q, root in enumerate(
                    self.twiddles(self.root(s, b), r), 1)]
            values = []
            for q, value in enumerate(w.dft(twisted)):
                position = start if q == 0 else f"{start} + {q * ns}u"
                if s == self.mid:  # Bluestein: times the kernel spectrum, conj (the inverse as a forward)
                    value = w.let(f"conj(cmul({value}, ld_pair(p.mid + {position})))")
                values.append((position, value))
            outputs.append(values)
        return outputs

    def twiddles(self, root: str, r: int) -> list[str]:
        """w^1 .. w^(r-1) of the stage's root w (from the table): the others its products
        w^q = w^(q // 2) w^(q - q // 2) (one load per butterfly instead of r - 1, measured faster; at
        most log2(r) + 1 roundings, within the tolerance's log2(M) eps)."""
        powers = {1: root}
        for q in range(2, r):
            powers[q] = self.w.let(f"cmul({powers[q // 2]}, {powers[q - q // 2]})")
        return [powers[q] for q in range(1, r)]

    def exchange(self, s: int, r: int, outputs: list[list[tuple[str, str]]]) -> list[list[str]]:
        """Stage s's outputs into workgroup memory and stage s + 1's inputs out of it, in rounds."""
        if self.shape.chunk:
            return self.exchange_chunks(s, r, outputs)
        length, threads = self.shape.length, self.shape.threads
        r_next = self.program[s + 1][0]
        inputs = self.declare(s + 1, r_next)
        rounds = self.shape.lines // self.shape.group
        put = {name: self.v(s, name) for name in ("turn", "slot", "lx")}  # writers: stage s's grouping
        get = {name: self.v(s + 1, name) for name in ("turn", "slot", "lx", "t")}  # readers: stage s + 1's
        for g in range(rounds):
            indent = "    " if rounds == 1 else "        "
            if rounds > 1:
                self.w.raw(f"    if ({put['turn']} == {g}u) {{")
            for b, values in enumerate(outputs):
                self.block(self.guard(r, b, s),
                           [f"sh[sw({put['slot']} + {position}, {put['lx']})] = {value};"
                            for position, value in values], indent)
            if rounds > 1:
                self.w.raw("    }")
            self.w.raw("    workgroupBarrier();")
            if rounds > 1:
                self.w.raw(f"    if ({get['turn']} == {g}u) {{")
            for b, row in enumerate(inputs):
                self.block(self.guard(r_next, b, s + 1),
                           [f"{name} = sh[sw({get['slot']} + {get['t']} + "
                            f"{b * threads + q * (length // r_next)}u, {get['lx']})];"
                            for q, name in enumerate(row)], indent)
            if rounds > 1:
                self.w.raw("    }")
            self.w.raw("    workgroupBarrier();")
        return inputs

    def exchange_chunks(self, s: int, r: int, outputs: list[list[tuple[str, str]]]) -> list[list[str]]:
        """The exchange of a line longer than the workgroup memory: round g moves its points g * chunk up
        to (g + 1) * chunk (the last round what is left). A butterfly's outputs lie in one aligned block
        of ns * r points, so where the rounds are whole blocks the butterfly writes in one round, else
        each output checks its round; stage s + 1 reads point t + c (t below ``threads``), whose round is
        known here unless t + c may cross a round's end."""
        length, threads, chunk = self.shape.length, self.shape.threads, self.shape.chunk
        ns, r_next = self.program[s][1], self.program[s + 1][0]
        inputs = self.declare(s + 1, r_next)
        t = self.v(s + 1, "t")
        for lo in range(0, length, chunk):
            size = min(chunk, length - lo)
            for b, values in enumerate(outputs):
                guard = self.guard(r, b, s)
                stores = [f"sh[sw({_minus(pos, lo)}, 0u)] = {value};" for pos, value in values]
                if chunk % (ns * r) == 0:  # the butterfly's block lies in one round
                    cond = _inside(values[0][0], lo, size)
                    self.block(cond if guard is None else f"{guard} && {cond}", stores)
                    continue
                self.block(guard, [f"if ({_inside(pos, lo, size)}) {{ {store} }}"
                                   for (pos, _), store in zip(values, stores)])
            self.w.raw("    workgroupBarrier();")
            for b, row in enumerate(inputs):
                reads = []
                for q, name in enumerate(row):
                    c = b * threads + q * (length // r_next)
                    if c // chunk != (c + threads - 1) // chunk:
                        at = f"{t} + {c}u"
                        read = f"{name} = sh[sw({_minus(at, lo)}, 0u)];"
                        reads.append(f"if ({_inside(at, lo, size)}) {{ {read} }}")
                    elif c // chunk == lo // chunk:
                        reads.append(f"{name} = sh[sw({t} + {c - lo}u, 0u)];")
                if reads:
                    self.block(self.guard(r_next, b, s + 1), reads)
            self.w.raw("    workgroupBarrier();")
        return inputs


def _inside(at: str, lo: int, size: int) -> str:
    """Is point ``at`` in the round of points lo .. lo + size - 1? (u32: below lo wraps to large)"""
    return f"{_minus(at, lo)} < {size}u"


def _minus(at: str, lo: int) -> str:
    return f"{at} - {lo}u" if lo else at

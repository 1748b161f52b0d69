"""The register-tiled f32 GEMM core shared by matmul_tiled and matmul_grouped, written out as WGSL text.

16 x 16 threads sum one BM x BN output tile over K in double-buffered steps of BK. Thread (tx, ty) owns
rows 4 ty + 64 h + i and columns 4 tx + 64 g + j (i, j < 4; h < BM / 64, g < BN / 64): per k it reads
BM / 64 vec4s of a (stored k-major, 4 rows a vec4) and BN / 64 of w from workgroup memory and does
BM * BN / 64 vec4 FMAs. Everything per thread is written out with constant indices, so that no
per-thread array reaches the driver:

* the accumulators are named vec4 variables (``c_h_i_g``), not an array a compiler may keep in memory;
* the workgroup tiles are 2-D arrays ``[2 BK][BM / 4]`` read at a constant first index and a
  loop-invariant second one (ty + 16 h), so the index clamp of WGSL's bounds checks is hoisted out of
  the K loop instead of paid on every read;
* the K loop runs two steps per iteration, one per buffer, so the buffer is a constant too.

The next step's operands are loaded into registers (the kernel's ``fetch`` statement) before the
current one is summed, then stored into the other buffer (``stage``), one barrier per step; the loop
body has no branch (see ``_step``).

Sums (``sums``): "none" is one running f32 sum per output (cuBLAS's way: its error against float64 is
about torch f32's; GroupedMatMul's 128x128 tiles, where a block sum would need a second set of 64
accumulators); "step" sums each step's BK products on their own before adding them to the running sum
("steph" / "stepq": one 64-row group / 64 x 64 quadrant of the thread's outputs after the other, so
the block sums take a half / a quarter of the registers); "kN" does so per N of K (N a multiple of
2 BK). A blocked sum's rounding error grows with the
block's length plus the number of blocks instead of with K; it costs a second set of accumulators.
"""

from __future__ import annotations

LANES = "xyzw"


#: the per-step block sums: all of a thread's outputs at once, or one 64-row group (h) / one 64 x 64
#: quadrant (h, g) after the other (fewer registers; w's, or a's and w's, vec4s are read once per group)
STEP_SUMS = ("step", "steph", "stepq")


def block_steps(bk: int, sums: str) -> int:
    """K steps per block sum: 0 = none (one running sum), 1 = each step, else an even count."""
    if sums == "none":
        return 0
    if sums in STEP_SUMS:
        return 1
    if not sums.startswith("k") or int(sums[1:]) % (2 * bk):
        raise ValueError(f"sums {sums!r}: 'none', 'step' or 'kN' with N a multiple of {2 * bk}")
    return int(sums[1:]) // bk


def _outputs(bm: int, bn: int) -> list[tuple[int, int, int]]:
    return [(h, i, g) for h in range(bm // 64) for i in range(4) for g in range(bn // 64)]


def _name(prefix: str, h: int, i: int, g: int) -> str:
    return f"{prefix}{h}_{i}_{g}"


def _groups(bm: int, bn: int, sums: str) -> list[list[tuple[int, int, int]]]:
    """The outputs summed together in one pass over a step's k (each group's block sums at once)."""
    outs = _outputs(bm, bn)
    if sums == "steph":
        return [[o for o in outs if o[0] == h] for h in range(bm // 64)]
    if sums == "stepq":
        return [[o for o in outs if (o[0], o[2]) == (h, g)] for h in range(bm // 64) for g in range(bn // 64)]
    return [outs]


def _block_names(bm: int, bn: int, sums: str) -> list[str]:
    return [f"q{slot}" for slot in range(max(len(group) for group in _groups(bm, bn, sums)))]


def declarations(bm: int, bn: int, bk: int, sums: str) -> str:
    """The accumulators (and the block sums' registers), zeroed."""
    names = [_name("c", *o) for o in _outputs(bm, bn)]
    if block_steps(bk, sums) != 0:
        names += _block_names(bm, bn, sums)
    return "\n".join(f"    var {n} = vec4<f32>();" for n in names)


def _sums(bm: int, bn: int, bk: int, sums: str, half: int, a: str, w: str) -> list[str]:
    """One step's products from buffer ``half`` of the workgroup tiles ``a`` and ``w``: per group of
    outputs, per k, the vec4s the group needs, then its FMAs (into c, or its block sums q)."""
    block = block_steps(bk, sums)
    lines = []
    for group in _groups(bm, bn, sums):
        rows, cols = sorted({h for h, _, _ in group}), sorted({g for _, _, g in group})
        for kk in range(bk):
            row = half * bk + kk
            reads = [f"let a{h} = {a}[{row}][ty + {16 * h}u];" for h in rows]
            reads += [f"let w{g} = {w}[{row}][tx + {16 * g}u];" for g in cols]
            terms = []
            for slot, (h, i, g) in enumerate(group):
                out, term = _name("c", h, i, g) if block == 0 else f"q{slot}", f"a{h}.{LANES[i]}"
                if block == 1 and kk == 0:
                    terms.append(f"{out} = {term} * w{g};")
                else:
                    terms.append(f"{out} = fma(vec4<f32>({term}), w{g}, {out});")
            lines.append("{ " + " ".join(reads + terms) + " }")
        if block == 1:
            lines.append(_add_blocks(group))
    return lines


def _add_blocks(group: list[tuple[int, int, int]]) -> str:
    return " ".join(f"{_name('c', *o)} = {_name('c', *o)} + q{slot};" for slot, o in enumerate(group))


def _step(bm: int, bn: int, bk: int, sums: str, half: int, at: str, parts: dict[str, str]) -> list[str]:
    """One K step ``at`` read from buffer ``half``: prefetch the next, sum, stage it, barrier. The
    prefetch and the stage run unconditionally: past the last step they load zeros (the loads check
    k against K) into the buffer no later step reads, which keeps the loop body free of branches (a
    branch merging the accumulators costs the driver's register allocator dozens of moves)."""
    k0 = f"({at} + 1u) * {bk}u"
    return [f"{{ {parts['fetch'].format(k0=k0)} }}",
            *_sums(bm, bn, bk, sums, half, parts["a"], parts["w"]),
            f"{{ {parts['stage'].format(half=1 - half)} }}",
            "workgroupBarrier();"]


def _indent(lines: list[str], depth: int) -> list[str]:
    return [" " * (4 * depth) + line for line in lines]


def k_loop(bm: int, bn: int, bk: int, sums: str, fetch: str, stage: str, a: str = "tile_a",
           w: str = "tile_w", depth: int = 1) -> str:
    """The K loop over ``steps`` steps (a u32 the kernel defines; step 0 is staged in buffer 0 before
    it). ``fetch`` loads step {k0}'s operands into registers (zeros past K), ``stage`` stores them into
    buffer {half}; ``a`` / ``w`` name the workgroup tiles. Each iteration runs two steps, one per
    buffer, with no branch between them: an odd step count gets one more step of zeros."""
    block = block_steps(bk, sums)
    parts = {"fetch": fetch, "stage": stage, "a": a, "w": w}
    body = ["{", *_indent(_step(bm, bn, bk, sums, 0, "ks", parts), 1), "}",
            "{", *_indent(_step(bm, bn, bk, sums, 1, "ks + 1u", parts), 1), "}"]
    even = "let even_steps = (steps + 1u) & ~1u;"
    if block <= 1:
        lines = [even, "for (var ks = 0u; ks < even_steps; ks = ks + 2u) {", *_indent(body, 1), "}"]
    else:
        zero = " ".join(f"{q} = vec4<f32>();" for q in _block_names(bm, bn, sums))
        lines = [even, f"for (var kb = 0u; kb < even_steps; kb = kb + {block}u) {{",
                 f"    let kb_end = min(even_steps, kb + {block}u);",
                 f"    {zero}",
                 "    for (var ks = kb; ks < kb_end; ks = ks + 2u) {", *_indent(body, 2), "    }",
                 f"    {_add_blocks(_outputs(bm, bn))}",
                 "}"]
    return "\n".join(_indent(lines, depth))


def stores(bm: int, bn: int, call: str) -> str:
    """One ``call`` per output vec4: {row} (4 ty + the thread's row offset) and {col} offsets, {acc}."""
    return "\n".join("    " + call.format(row=64 * h + i, col=64 * g, acc=_name("c", h, i, g))
                     for h, i, g in _outputs(bm, bn))


def loop_steps(k: int, bk: int) -> int:
    """Loop iterations one invocation runs for K = k (lavapipe counts them)."""
    return -(-k // (2 * bk)) + 2

"""GGUF matmuls and lookups with the weights left quantised in the arena (GGML block layout).

* ``DequantMatMulGguf``: ``y = x @ dequant(W)^T`` (ggml_mul_mat). Up to ``GEMV_MAX_ROWS`` rows of
  x (decode) run the bandwidth-bound GEMV kernel: each weight row is read once, by a team of
  lanes striding over its 32-element units, with x staged in workgroup memory (on CPU adapters up
  to ``GEMV_BLOCKED_MAX_ROWS`` rows in blocks of ``GEMV_MAX_ROWS``); a team's lanes add their partial sums
  with subgroup shuffles where the device has the ``subgroup`` feature (``USE_SUBGROUPS``), else
  through workgroup memory; one x row that fits one chunk (decode) is loaded once and its RMSNorm
  summed with subgroupAdd there (``USE_FAST_STAGE``). More rows (prefill) run the f32 GEMM's
  register-tiled core (lowering/matmul, quant_gguf_gemm.wgsl) with W dequantised 4 k at a time in
  its weight fetch, K split by ``matmul.k_splits`` (``tiled_steps``); on an H100 SmolLM2's four
  weight shapes at 512 rows take 141 us, 1.3x quant_gguf_tiled, the kernel this replaced (its own
  small tiles and k-groups). CPU adapters keep the GEMV's rows variant longer.
* ``FusedGgufMatMul`` (made by ir/passes/patterns.py once this lowerer exists): the same GEMV
  with RMSNorm applied while x is staged, SwiGLU's W_up as a second weight set in the same
  pass, and the residual added in the epilogue: one dispatch instead of up to five. A fused QKV
  projection also rotates q and k and appends k, v to the KV caches in its epilogue (RoPE pairs
  never straddle two workgroups: ``rope_plan``), replacing the rope_kv_append dispatch.
* ``GatherGguf``: one workgroup per looked-up row, dequantised exactly like gguf-py.
* ``DequantGroupedMatMul`` (MoE): the GEMV kernel in grouped mode, one x row per grid row,
  each reading the W slab of its expert. Right for decode; prefill re-reads each expert per
  token (correct, not fast).

Types with a WGSL decoder: ``quant_gguf_wgsl.GPU_TYPES``. The others (Q8_1, Q8_K, IQ4_NL,
IQ4_XS) run as host steps (``host_ops/gguf_matmul.py``) and show up as such in the schedule.
"""

from __future__ import annotations

import math

from rlxpy.errors import GraphError, LimitError, where
from rlxpy.host_ops import gguf_matmul
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.quant import ROPE_ROLES, gguf_row_bytes
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import ANY, accepts, workgroup_var_bytes
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.lowering.matmul import MATMUL_TILED, fitting_splits, k_splits, vec4_access
from rlxpy.wgpu_backend.lowering.matmul import tiled_steps as gemm_steps
from rlxpy.wgpu_backend.lowering.quant_gguf_wgsl import GPU_TYPES, SCALE_PER_UNIT, UNIT, decode_subs
from rlxpy.wgpu_backend.schedule import MAX_GROUPS, LowerCtx, Step, lowers

GEMV_THREADS = 256
XS_FLOATS = 4096  # workgroup floats of the GEMV's x chunk (16 KiB)
#: x f32 (w, w_up: GGML blocks; idx, pos: indices); the fused epilogue's f32 inputs by role
#: (FusedGgufMatMul.input_roles); the RoPE epilogue appends to the KV caches in place
GEMV_DTYPES = accepts(DType.F32, out=DType.F32, gamma=DType.F32, residual=DType.F32, k_cache=DType.F32,
                      v_cache=DType.F32, cos=DType.F32, sin=DType.F32)
QUANT_GGUF_GEMV = kernel(
    "quant_gguf_gemv",
    params("QuantGgufGemvParams", ("m",), m=U32, n=U32, k=U32, x=U32, w=U32, y=U32, row_bytes=U32,
           units=U32, tpr=U32, rows_per_wg=U32, w_stride=U32, idx=U32, experts=U32, w_up=U32, gamma=U32,
           residual=U32, eps=F32, q_width=U32, kv_width=U32, capacity=U32, max_pos=U32, k_cache=U32,
           v_cache=U32, cos=U32, sin=U32, pos=U32),
    dtypes=GEMV_DTYPES, mutates=("k_cache", "v_cache"),
    # xs (XS vec4s: the x chunk, then the partial sums), norm_parts (256 f32), inv_rms (8), ys (YS f32);
    # the default variant stages 2048 floats of one x row (a full 16 KiB chunk needs ~16.5 KiB in all)
    workgroup=(GEMV_THREADS, 1, 1),
    shared_bytes=lambda s: 16 * int(s["XS"]) + 4 * (256 + 8) + workgroup_var_bytes(4 * int(s["YS"])),
    sizes={"XS": 512, "YS": 1})  # grid spans n: m shrinks, the grid stays
ROWS_WG = 8  # one SIMD batch of lavapipe per workgroup: few invocations still spread over the cores
# The CPU variant's work per invocation: every storage load is a per-lane scalar load on llvmpipe, so
# an invocation takes several weight rows (x units shared; half as many with SwiGLU's two weight
# sets) and up to ROWS_X_MAX x rows (weight units shared). Measured on lavapipe, 2 cores
# (benches/RESULTS.md): 16 rows for one x row, 8 rows x 4 x rows for blocks (16 x 4 is faster
# still but takes twice the LLVM compile time, 4.4 s a kernel). More accumulators only spill.
ROWS_PER_INVOCATION = 16
ROWS_PER_INVOCATION_BLOCK = 8
ROWS_X_MAX = 4
QUANT_GGUF_ROWS = kernel("quant_gguf_rows", QUANT_GGUF_GEMV.params, dtypes=GEMV_DTYPES,
                         mutates=("k_cache", "v_cache"), workgroup=(ROWS_WG, 1, 1))
QUANT_GGUF_GEMM = kernel(
    "quant_gguf_gemm", MATMUL_TILED.params, dtypes=accepts(DType.F32, out=DType.F32),
    workgroup=(16, 16, 1), shared_bytes=MATMUL_TILED.shared_bytes,
    sizes=dict(MATMUL_TILED.sizes), extent_axis=1,
    # as matmul_tiled: workgroup tiles indexed in range by construction; the weight's decode clamped
    checked=False)
QUANT_GGUF_GATHER = kernel(
    "quant_gguf_gather",
    params("QuantGgufGatherParams", ("count",), count=U32, rows=U32, k=U32, table=U32, idx=U32, y=U32,
           row_bytes=U32), dtypes=accepts(ANY, (DType.F32, DType.I32, DType.U32), out=DType.F32),
    extent_axis=0)

#: QuantGgufGemvParams fields of FusedGgufMatMul's extra inputs (0 when absent).
FUSED_FIELDS = ("w_up", "gamma", "residual", "q_width", "kv_width", "capacity", "max_pos") + ROPE_ROLES
GEMV_MAX_ROWS = 8  # x rows one GEMV workgroup takes together (weights read once)
# More rows run the tiled GEMM from this many on: on an H100 (benches/RESULTS.md, 2026-11-26) it beat
# the GEMV in blocks of GEMV_MAX_ROWS (grid y, the weights read once per block) at every count from 9
# (SmolLM2's shapes at 32 rows, the default prefill chunk: 10-14 us against 23-40). CPU adapters keep
# the GEMV's rows variant up to GEMV_BLOCKED_MAX_ROWS: on llvmpipe workgroup memory and barriers buy
# nothing.
TILED_MIN_ROWS = GEMV_MAX_ROWS + 1
GEMV_BLOCKED_MAX_ROWS = 2048
# GEMV work split, tuned on an H100 (benches/bench_quant.py): few lanes per weight row keep the
# cross-lane reduction short; teams owning several rows amortise staging x over more weights.
MAX_LANES = 32  # lanes per weight row for small matrices (latency-bound: spread the work wide)
MAX_LANES_BIG = 16  # ... and from BIG_ROWS rows on (bandwidth-bound: shorter reductions)
BIG_ROWS = 8192
MAX_TEAM_ROWS = 4  # weight rows per team (their accumulators are registers)
MAX_ACCUMULATORS = 8  # weight rows x x rows per lane
MIN_GROUPS = 128  # teams take more rows only while the grid keeps this many workgroups
#: Sum a team's lanes with subgroup shuffles where the device has wgpu's ``subgroup`` feature (a
#: compile-time choice per device; False keeps the workgroup-memory sum everywhere, for A/B runs).
#: The shuffles assume that a subgroup is a run of consecutive invocation indices starting at a
#: multiple of its (power-of-two) size, as on NVIDIA, AMD, Intel and lavapipe for 1-D workgroups;
#: the team size is then rounded to a power of two so that no team straddles two subgroups.
#: Naga (wgpu 0.32) rejects WGSL's ``enable subgroups;`` and takes the builtins without it.
USE_SUBGROUPS = True
#: ... for matrices of fewer weight rows than this: on an H100 (benches/bench_gemv_subgroups.py) the
#: shuffles made SmolLM2's layer GEMVs (576-1536 rows) 5-8% faster, while its 49152-row logits GEMV
#: (9 lanes a row; 16 with power-of-two teams, 2 of them busy in the second pass) got 27% slower.
SUBGROUP_MAX_ROWS = BIG_ROWS
#: With subgroups, one x row staged in one chunk (decode) loads x once and sums the RMSNorm's squares
#: with subgroupAdd (``stage_source``); False keeps the general staging (A/B runs).
USE_FAST_STAGE = True

#: Expert-index dtypes of the grouped GEMV (``expert_<dtype>`` in include/quant_gguf_gemv_common.wgsl)
#: and index dtypes of the gather (``row_<dtype>`` in quant_gguf_gather.wgsl): truncated toward zero.
INDEX_TYPES = {DType.F32: "f32", DType.I32: "i32", DType.U32: "u32"}


def gemv_plan(units: int, rows: int, x_rows: int = 1, pow2: bool = False) -> tuple[int, int, int]:
    """(lanes per weight row, teams per workgroup, weight rows per team).

    Lanes: the fewest passes of at most ``MAX_LANES`` (``MAX_LANES_BIG`` for big matrices) over
    a row's units, split evenly so no pass leaves lanes idle (``pow2``: then rounded up to a power
    of two, for subgroup sums). Rows per team: up to ``MAX_TEAM_ROWS`` while the grid keeps
    ``MIN_GROUPS`` workgroups."""
    cap = MAX_LANES_BIG if rows >= BIG_ROWS else MAX_LANES
    passes = max(1, math.ceil(units / cap))
    lanes = max(1, math.ceil(units / passes))
    if pow2:
        lanes = 1 << (lanes - 1).bit_length()
    teams = GEMV_THREADS // lanes
    team_rows = max(1, min(MAX_TEAM_ROWS, MAX_ACCUMULATORS // x_rows, rows // (teams * MIN_GROUPS)))
    return lanes, teams, team_rows


def rope_plan(lanes: int, teams: int, team_rows: int, rope: ops.RopeKvAppend, x_rows: int,
              where_: str, pow2: bool = False) -> tuple[int, int, int]:
    """``gemv_plan`` adjusted so that each workgroup's block of ``teams * team_rows`` consecutive
    output rows holds both rows of every RoPE pair: an even block for interleaved pairs (2i, 2i+1)
    of even-sized heads, else whole heads (pairs (i, i + n_rot/2)). ``pow2`` keeps lanes a power
    of two."""
    if rope.interleaved and rope.head_dim % 2 == 0:
        return lanes, teams - (teams * team_rows) % 2, team_rows
    team_rows = max(r for r in range(1, max(1, min(MAX_TEAM_ROWS, MAX_ACCUMULATORS // x_rows)) + 1)
                    if rope.head_dim % r == 0)
    teams = rope.head_dim // team_rows
    if teams > GEMV_THREADS:
        raise LimitError(f"{where_}: RoPE heads of {rope.head_dim} rows do not fit one GEMV workgroup")
    lanes = min(lanes, GEMV_THREADS // teams)
    return (1 << (lanes.bit_length() - 1) if pow2 else lanes), teams, team_rows


def chunk_elems(x_rows: int, k: int) -> int:
    """Elements of each x row staged per chunk: all of them when they fit (whole units)."""
    chunk = XS_FLOATS // x_rows // UNIT * UNIT
    return min(chunk, max(UNIT, math.ceil(k / UNIT) * UNIT))


def unit_dot_source(qtype: str, x_rows: int, team_rows: int, swiglu: bool = False) -> str:
    """The statements of quant_gguf_gemv.wgsl's ``unit_dot`` for ``x_rows`` x rows and ``team_rows``
    weight rows (times two with SwiGLU's W_up), fully unrolled: the accumulators are then registers,
    the chunk indices constants, and each weight word is loaded once (``q_unit``)."""
    weights = [("", "rb", "acc")] + ([("u", "rbu", "acc_up")] if swiglu else [])
    lines = []
    for tag, base, _ in weights:
        for i in range(team_rows):
            second = f"s{tag}{i}_0" if qtype in SCALE_PER_UNIT else f"q_scale({base}{i}, u, 1u)"
            lines += [f"    let {base}{i} = {base} + {i}u * stride;",
                      f"    let q{tag}{i} = q_unit({base}{i}, u);",
                      f"    let s{tag}{i}_0 = q_scale({base}{i}, u, 0u);",
                      f"    let s{tag}{i}_1 = {second};"]
    for half in range(2):
        chunks = range(4 * half, 4 * half + 4)
        for r in range(x_rows):
            lines += [f"    let x{r}_{c} = xs[{r}u * KC4 + {c}u * UPC + uc];" for c in chunks]
            quad = [f"x{r}_{c}" for c in chunks]
            lines.append(f"    let sx{r}_{half} = dot(({quad[0]} + {quad[1]}) + ({quad[2]} + {quad[3]}), "
                         "vec4<f32>(1.0));")
            for tag, _, accumulator in weights:
                for i in range(team_rows):
                    dots = [f"dot(q{tag}{i}[{c}], x{r}_{c})" for c in chunks]
                    target = f"{accumulator}[{i}][{r}]"
                    lines.append(f"    {target} = {target} + combine(s{tag}{i}_{half}, "
                                 f"({dots[0]} + {dots[1]}) + ({dots[2]} + {dots[3]}), sx{r}_{half});")
    return "\n".join(lines)


def partials_source(x_rows: int, team_rows: int, swiglu: bool = False) -> str:
    """Unrolled stores of every accumulator into workgroup memory: slot ((i * MR + r) * 256 + t),
    SwiGLU's second set after the first."""
    lines = []
    for set_index, accumulator in enumerate(("acc", "acc_up")[:1 + swiglu]):
        for i in range(team_rows):
            for r in range(x_rows):
                slot = f"{((set_index * team_rows + i) * x_rows + r) * GEMV_THREADS}u + t"
                lines.append(f"    xs[({slot}) >> 2u][({slot}) & 3u] = {accumulator}[{i}][{r}];")
    return "\n".join(lines)


def lane_sum_source(x_rows: int, team_rows: int, swiglu: bool = False) -> str:
    """Subgroup variant of the cross-lane sum: a shuffle-xor butterfly over each aligned group of
    ``span`` lanes (a power of two dividing the team and the subgroup), so any subgroup size works;
    every lane of a group ends with the group's sums. Unrolled over the accumulators (registers)."""
    lines = ["    for (var off = 1u; off < span; off = off << 1u) {"]
    for accumulator in ("acc", "acc_up")[:1 + swiglu]:
        for i in range(team_rows):
            for r in range(x_rows):
                target = f"{accumulator}[{i}][{r}]"
                lines.append(f"        {target} = {target} + subgroupShuffleXor({target}, off);")
    lines.append("    }")
    return "\n".join(lines)


def stage_source(kc: int, norm: bool) -> str:
    """quant_gguf_gemv's STAGE (FAST_STAGE: one x row, k <= KC, subgroups): thread t's quads t + 256 n of
    x (and with ``norm`` gamma's) loaded together; the RMSNorm's sum of squares by subgroupAdd, one
    value per subgroup through workgroup memory and one barrier; then the quads, scaled, into the chunk."""
    quads = range(math.ceil(kc / 4 / GEMV_THREADS))
    out = [f"        let xq{q} = quad_at(blk.x, (t + {q * GEMV_THREADS}u) * 4u);" for q in quads]
    if norm:
        out += [f"        let gq{q} = quad_at(p.gamma, (t + {q * GEMV_THREADS}u) * 4u);" for q in quads]
        out += [f"        let ss = subgroupAdd({' + '.join(f'dot(xq{q}, xq{q})' for q in quads)});",
                "        if ((t & (sg_size - 1u)) == 0u) {",
                "            norm_parts[t / sg_size] = ss;",
                "        }",
                "        workgroupBarrier();",
                "        var s = 0.0;",
                "        for (var j = 0u; j < 256u / sg_size; j = j + 1u) {",
                "            s = s + norm_parts[j];",
                "        }",
                "        let inv = 1.0 / sqrt(s / f32(p.k) + p.eps);"]
    for q in quads:
        value = f"xq{q} * inv * gq{q}" if norm else f"xq{q}"
        out += [f"        if (t + {q * GEMV_THREADS}u < KC4) {{",
                f"            let quad = t + {q * GEMV_THREADS}u;",
                f"            xs[(quad & 7u) * UPC + (quad >> 3u)] = {value};",
                "        }"]
    return "\n".join(out)


def _reduce_subs(sub: bool, x_rows: int, team_rows: int, swiglu: bool) -> dict[str, str]:
    """The GEMV's cross-lane sum: subgroup shuffles (``sub``), else workgroup memory alone."""
    if not sub:
        return {"SG_ARGS": "", "SPAN": "1u", "LANE_SUM": ""}
    return {"SG_ARGS": ", @builtin(subgroup_size) sg_size: u32", "SPAN": "min(p.tpr, sg_size)",
            "LANE_SUM": lane_sum_source(x_rows, team_rows, swiglu)}


def _check_window(node: Node, ctx: LowerCtx) -> None:
    if ctx.window_size >= 1 << 32:
        raise LimitError(f"{where(node)}: byte offsets of a {ctx.window_size / 2**30:.1f} GiB window "
                         f"do not fit the kernels' u32 addressing")


def _epilogue_subs(qtype: str, grouped: bool, fused: dict[str, Node], rope: ops.RopeKvAppend | None,
                   idx: Node | None) -> dict[str, object]:
    """The WGSL constants both GEMV variants share: decoder, mode and fused epilogues."""
    flag = {True: "true", False: "false"}
    return {**decode_subs(qtype), "GROUPED": flag[grouped], "NORM": flag["gamma" in fused],
            "SWIGLU": flag["w_up" in fused], "RESIDUAL": flag["residual" in fused],
            "ROPE": flag[rope is not None], "RD": rope.head_dim if rope else 2,
            "ROT": rope.rot if rope else 2, "INTERLEAVED": flag[bool(rope and rope.interleaved)],
            "EXPERT": INDEX_TYPES[idx.dtype] if idx is not None else "none"}


def _gemv_fields(ctx: LowerCtx, qtype: str, x: Node, w: Node, node: Node, m: int, n: int, k: int,
                 idx: Node | None, experts: int, fused: dict[str, Node], eps: float,
                 rope: ops.RopeKvAppend | None) -> dict[str, float | int]:
    """QuantGgufGemvParams of both variants, less the work split (tpr, rows_per_wg)."""
    offsets = {role: ctx.offset(t) * (4 if role == "w_up" else 1) for role, t in fused.items()}
    if rope is not None:
        offsets.update(q_width=rope.q_width, kv_width=rope.kv_width, capacity=fused["k_cache"].shape[0],
                       max_pos=fused["cos"].shape[0])
    row_bytes = gguf_row_bytes(qtype, k)
    return dict(m=m, n=n, k=k, x=ctx.offset(x), w=ctx.offset(w) * 4, y=ctx.offset(node),
                row_bytes=row_bytes, units=math.ceil(k / UNIT), w_stride=n * row_bytes,
                idx=ctx.offset(idx) if idx is not None else 0, experts=experts, eps=eps,
                **{role: offsets.get(role, 0) for role in FUSED_FIELDS})


def gemv_step(node: Node, ctx: LowerCtx, qtype: str, x: Node, w: Node, m: int, n: int, k: int,
              idx: Node | None = None, experts: int = 0, fused: dict[str, Node] | None = None,
              eps: float = 0.0, rope: ops.RopeKvAppend | None = None) -> Step:
    """The GEMV dispatch: ``m`` x rows together, or (``idx`` given) one grid row per x row.
    ``fused`` holds FusedGgufMatMul's extra inputs by role (w_up, gamma, residual, and with
    ``rope`` the RopeKvAppend inputs k_cache, v_cache, cos, sin, pos). A CPU adapter gets the
    rows variant (``rows_step``)."""
    grouped = idx is not None
    fused = fused or {}
    if ctx.facts.cpu and rows_step_fits(n, rope):
        return rows_step(node, ctx, qtype, x, w, m, n, k, idx, experts, fused, eps, rope)
    swiglu = "w_up" in fused
    rows_in_wg = 1 if grouped else min(m, GEMV_MAX_ROWS)
    blocks = 1 if grouped else math.ceil(m / rows_in_wg)
    if blocks > 1 and (fused or rope is not None):
        raise LimitError(f"{where(node)}: fused GEMV epilogues take at most {GEMV_MAX_ROWS} rows, got {m}")
    kc = chunk_elems(rows_in_wg, k)
    sub = USE_SUBGROUPS and n < SUBGROUP_MAX_ROWS and "subgroup" in ctx.facts.features
    lanes, teams, team_rows = gemv_plan(math.ceil(k / UNIT), n, rows_in_wg, pow2=sub)
    if rope is not None:
        lanes, teams, team_rows = rope_plan(lanes, teams, team_rows, rope, rows_in_wg, where(node), pow2=sub)
    xs_floats = max(rows_in_wg * kc, team_rows * rows_in_wg * GEMV_THREADS * (2 if swiglu else 1))
    ys_floats = rows_in_wg * teams * team_rows if rope is not None else 1
    _check_window(node, ctx)
    groups = max(1, math.ceil(n / (teams * team_rows)))
    grid = (groups, min(m, MAX_GROUPS), math.ceil(m / MAX_GROUPS)) if grouped else (groups, blocks, 1)
    subs = {**_epilogue_subs(qtype, grouped, fused, rope, idx), "MR": rows_in_wg, "RR": team_rows, "KC": kc,
            "XS": xs_floats // 4, "UNIT_DOT": unit_dot_source(qtype, rows_in_wg, team_rows, swiglu),
            "PARTIALS": partials_source(rows_in_wg, team_rows, swiglu), "YS": ys_floats,
            **_reduce_subs(sub, rows_in_wg, team_rows, swiglu)}
    # decode: x staged once (big matrices too, whose team sums stay in workgroup memory)
    fast = USE_FAST_STAGE and "subgroup" in ctx.facts.features and rows_in_wg == 1 and k <= kc
    subs.update(FAST_STAGE="true" if fast else "false",
                STAGE=stage_source(kc, "gamma" in fused) if fast else "")
    if fast:
        subs["SG_ARGS"] = ", @builtin(subgroup_size) sg_size: u32"
    # the RoPE epilogue appends to the caches: its rows must all land, so it never scales; nor do row
    # blocks (a block's rows would not follow a rescaled m)
    scalable = rope is None and blocks == 1
    return ctx.dispatch(QUANT_GGUF_GEMV, node, grid, subs, scalable=scalable, tpr=lanes, rows_per_wg=teams,
                        **_gemv_fields(ctx, qtype, x, w, node, m, n, k, idx, experts, fused, eps, rope))


def rows_step_fits(n: int, rope: ops.RopeKvAppend | None) -> bool:
    """The CPU variant takes RoPE rows in pairs inside whole heads: every head must be complete and even."""
    return rope is None or (rope.head_dim % 2 == 0 and rope.rot % 2 == 0 and n % rope.head_dim == 0)


def rows_step(node: Node, ctx: LowerCtx, qtype: str, x: Node, w: Node, m: int, n: int, k: int,
              idx: Node | None, experts: int, fused: dict[str, Node], eps: float,
              rope: ops.RopeKvAppend | None) -> Step:
    """gemv_step's CPU variant (quant_gguf_rows.wgsl): one invocation per group of output rows
    (RoPE pairs with RoPE), all of k, no workgroup memory; same params and epilogues."""
    grouped = idx is not None
    epilogue = bool(fused) or rope is not None  # a fused epilogue needs all its rows in one block
    rows_in_inv = 1 if grouped else min(m, GEMV_MAX_ROWS if epilogue else ROWS_X_MAX)
    blocks = 1 if grouped else math.ceil(m / rows_in_inv)
    if blocks > 1 and epilogue:
        raise LimitError(f"{where(node)}: fused GEMV epilogues take at most {GEMV_MAX_ROWS} rows, got {m}")
    _check_window(node, ctx)
    rr = ROWS_PER_INVOCATION if rows_in_inv == 1 else ROWS_PER_INVOCATION_BLOCK
    rr //= 2 if "w_up" in fused else 1
    groups = math.ceil(math.ceil(n / rr) / ROWS_WG)
    grid = (groups, min(m, MAX_GROUPS), math.ceil(m / MAX_GROUPS)) if grouped else (groups, blocks, 1)
    subs = {**_epilogue_subs(qtype, grouped, fused, rope, idx), "MR": rows_in_inv, "RR": rr,
            "K_TAIL": "true" if k % UNIT else "false",
            "ACCUMULATE": rows_accumulate_source(rows_in_inv, rr, "w_up" in fused)}
    return ctx.dispatch(QUANT_GGUF_ROWS, node, grid, subs, scalable=rope is None and blocks == 1, tpr=1,
                        rows_per_wg=ROWS_WG,
                        **_gemv_fields(ctx, qtype, x, w, node, m, n, k, idx, experts, fused, eps, rope))


def rows_accumulate_source(x_rows: int, rows: int, swiglu: bool) -> str:
    """quant_gguf_rows' main loop, unrolled over ``rows`` weight rows (twice with SwiGLU's W_up) and
    ``x_rows`` x rows: scalar accumulators (registers), each weight unit decoded once, each x unit
    loaded once per invocation."""
    sets = [("a", "blk.w")] + ([("b", "p.w_up")] if swiglu else [])
    out = [f"    var {t}{i}_{r} = 0.0;" for t, _ in sets for i in range(rows) for r in range(x_rows)]
    out += [f"    let rb{t}{i} = {base} + rows[{i}] * p.row_bytes;" for t, base in sets for i in range(rows)]
    out.append("    for (var u = 0u; u < p.units; u = u + 1u) {")
    for r in range(x_rows):
        out += [f"        let x{r} = x_unit(blk.x, {r}u, u);", f"        let sx{r} = half_sums(x{r});"]
    for t, _ in sets:
        for i in range(rows):
            out += [f"        let q{t}{i} = q_unit(rb{t}{i}, u);",
                    f"        let sa{t}{i} = q_scale(rb{t}{i}, u, 0u);",
                    f"        let sb{t}{i} = q_scale(rb{t}{i}, u, 1u);"]
            out += [f"        {t}{i}_{r} = {t}{i}_{r} + unit_dot(q{t}{i}, sa{t}{i}, sb{t}{i}, x{r}, sx{r});"
                    for r in range(x_rows)]
    out.append("    }")
    out += [f"    {target}[{i}][{r}] = {t}{i}_{r};" for (t, _), target in zip(sets, ("res", "res_up"))
            for i in range(rows) for r in range(x_rows)]
    return "\n".join(out)


def tiled_applies(m: int, k: int, cpu: bool = False) -> bool:
    """Whether m rows take the tiled GEMM (quant_gguf_gemm) rather than the GEMV. Its weight fetch
    decodes 4 k at a time, so K is a multiple of 4 (every block type; a float weight may not be)."""
    return m >= TILED_MIN_ROWS and k % 4 == 0 and not (cpu and m <= GEMV_BLOCKED_MAX_ROWS)


def split_scratch(node: Node, graph) -> int:
    """Bytes of the K split's partial products (matmul.k_splits) when the tiled GEMM takes the node."""
    op: ops.DequantMatMulGguf = node.op
    m = graph[node.inputs[0]].numel // op.k if op.k else 0
    if op.qtype not in GPU_TYPES or not tiled_applies(m, op.k):
        return 0
    splits = k_splits(m, op.n, op.k, 1)
    return 0 if splits == 1 else 4 * splits * m * op.n


def tiled_steps(node: Node, ctx: LowerCtx, qtype: str, x: Node, w: Node, m: int, n: int,
                k: int) -> list[Step]:
    """matmul_tiled's GEMM (lowering/matmul: its tiles, K steps and block sums; K split by
    ``k_splits``) on x and the GGML blocks, dequantised in the fetch (quant_gguf_gemm.wgsl)."""
    _check_window(node, ctx)
    fields = dict(m=m, n=n, k=k, a=ctx.offset(x), w=0, y=ctx.offset(node), bias=0, has_bias=0, stride_a=0,
                  stride_w=0, stride_y=0, split1=n, split2=n, block_rows=m, k_len=k,
                  w_bytes=ctx.offset(w) * 4, row_bytes=gguf_row_bytes(qtype, k))
    vec4 = vec4_access(fields, False)
    return gemm_steps(node, ctx, QUANT_GGUF_GEMM, fields, (False, True), vec4,
                      chunks=fitting_splits(ctx, m, n, k_splits(m, n, k, 1)), subs=decode_subs(qtype))


@lowers(ops.DequantMatMulGguf, scratch=split_scratch)
def lower_dequant_matmul_gguf(node: Node, ctx: LowerCtx) -> list[Step]:
    x, w = ctx.inputs(node)
    op: ops.DequantMatMulGguf = node.op
    if op.qtype not in GPU_TYPES:
        return [ctx.host(node, "gguf_matmul",
                         gguf_matmul.matmul_step(x.id, w.id, node.id, op.qtype, op.n, op.k))]
    m = x.numel // op.k if op.k else math.prod(x.shape[:-1])
    if m == 0 or op.n == 0:
        return []
    if not tiled_applies(m, op.k, ctx.facts.cpu):
        return [gemv_step(node, ctx, op.qtype, x, w, m, op.n, op.k)]
    return tiled_steps(node, ctx, op.qtype, x, w, m, op.n, op.k)


@lowers(ops.DequantGroupedMatMul)
def lower_dequant_grouped_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    x, w, idx = ctx.inputs(node)
    op: ops.DequantGroupedMatMul = node.op
    if op.qtype not in GPU_TYPES or idx.dtype not in INDEX_TYPES:
        # other index dtypes are rare enough that the host step (any dtype) covers them
        return [ctx.host(node, "gguf_grouped_matmul",
                         gguf_matmul.grouped_step(x.id, w.id, idx.id, node.id, op.qtype, op.n, op.k))]
    m = x.shape[0]
    if m == 0 or op.n == 0:
        return []
    return [gemv_step(node, ctx, op.qtype, x, w, m, op.n, op.k, idx=idx, experts=w.shape[0])]


@lowers(ops.GatherGguf)
def lower_gather_gguf(node: Node, ctx: LowerCtx) -> list[Step]:
    table, idx = ctx.inputs(node)
    op: ops.GatherGguf = node.op
    if op.qtype not in GPU_TYPES:
        step = gguf_matmul.gather_step(table.id, idx.id, node.id, op.qtype, op.k)
        return [ctx.host(node, "gguf_gather", step)]
    count = idx.numel
    if count == 0 or op.k == 0:
        return []
    if table.shape[0] == 0:
        raise GraphError(f"{where(node)}: table {table.type} has no rows to look up")
    _check_window(node, ctx)
    return [ctx.dispatch(QUANT_GGUF_GATHER, node, ctx.grid_rows(count),
                         {**decode_subs(op.qtype), "INDEX": INDEX_TYPES[idx.dtype]},
                         count=count, rows=table.shape[0], k=op.k, table=ctx.offset(table) * 4,
                         idx=ctx.offset(idx), y=ctx.offset(node), row_bytes=gguf_row_bytes(op.qtype, op.k))]


@lowers(ops.FusedGgufMatMul)
def lower_fused_gguf_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    """The decode GEMV with its neighbours folded in (ir/passes/patterns.py): RMSNorm while x is
    staged, SwiGLU as a second weight set in the same pass, the residual in the epilogue."""
    op: ops.FusedGgufMatMul = node.op
    by_role = dict(zip(op.input_roles(), ctx.inputs(node)))
    x, w = by_role["x"], by_role["w"]
    m = x.numel // op.k if op.k else math.prod(x.shape[:-1])
    if m == 0 or op.n == 0:
        return []
    extra = {role: t for role, t in by_role.items() if role not in ("x", "w")}
    if op.qtype in GPU_TYPES and m <= GEMV_MAX_ROWS:
        return [gemv_step(node, ctx, op.qtype, x, w, m, op.n, op.k, fused=extra, eps=op.eps, rope=op.rope)]
    # the pattern pass only fuses GEMV-sized rows; anything else is correct but on the host, where
    # the RoPE epilogue's cache appends (the op's mutated inputs) are written back too
    return host_steps(node, ctx, name="gguf_fused_matmul")

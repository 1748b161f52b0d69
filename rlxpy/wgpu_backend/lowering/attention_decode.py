"""Decode attention in one pass: attention_decode_row (one workgroup per query row).

attention_decode (lowering/attention.py) gives a workgroup the rows of one kv head and walks the keys
in blocks of 256 with about fourteen barriers per block; a 9-head decode step with 3 kv heads then runs
3 workgroups through a chain of barriers. attention_decode_row gives every query row (head, query,
batch) its own workgroup and splits the keys over key groups of LK lanes: each group scores KEYS keys
per step (every K and V load of the step issued before the first is used), sums a dot product over
its lanes with subgroup shuffles, and keeps its own running max, sum and output dims, so the key loop
needs no barrier; the groups merge once at the end. It serves the decode steps that need no key split
(``splits == 1`` in lowering/attention.py: KV caches up to UNSPLIT_CACHE_KEYS, short key ranges).

Subgroups (``USE_SUBGROUPS`` and the device's ``subgroup`` feature): the shuffles assume, like the
GGUF GEMV's (lowering/quant_gguf.py), that a subgroup is a run of consecutive invocation indices starting
at a multiple of its power-of-two size. A subgroup narrower than LK (checked at run time) and a device
without the feature (GL) compute each key's dot product whole in every lane instead: the same result
up to the summation order, more loads. Naga (wgpu 0.32) takes the builtins without ``enable subgroups;``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.attention_flash import ATTENTION_DTYPES, ATTENTION_FIELDS
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import LowerCtx, Step

ROW_WG = 256
ROW_DIMS = 8  # dims per lane wanted: lanes per key = ceil(head_dim / 8) rounded up to a power of two
ROW_KEYS = 4  # keys a group scores per step: 4 x (K + V) x 8 dims = 64 loads in flight per lane
#: Sum a key group's dot product with subgroup shuffles where the device has wgpu's ``subgroup`` feature
#: (a compile-time choice; False computes it whole in every lane everywhere, for A/B runs).
USE_SUBGROUPS = True
#: ... and merge a subgroup's key groups by shuffles before the workgroup-memory merge (A/B runs).
GROUP_MERGE = True

ATTENTION_DECODE_ROW = kernel(
    "attention_decode_row",
    params("AttentionDecodeRowParams", ("kv_len",), **ATTENTION_FIELDS, heads=U32),
    dtypes=ATTENTION_DTYPES,
    workgroup=(ROW_WG, 1, 1),
    # part_m and part_l (G = 256 / LK floats each), part_acc (256 * DL floats)
    shared_bytes=lambda s: 4 * (2 * (ROW_WG // int(s["LK"])) + ROW_WG * int(s["DL"])),
    sizes={"LK": 32, "DL": 8},
)


def row_fits_loop_budget(s_k: int, head_dim: int) -> bool:
    """Does one attention_decode_row invocation stay within LOOP_BUDGET over S_k keys where it sums
    each dot product whole (GL, or lavapipe's 8-wide subgroups past 64 dims)? A step of ROW_KEYS keys
    per group then loops ROW_KEYS x head_dim times (4096 keys of dim 256 came out wrong on lavapipe)."""
    lanes, _ = row_plan(head_dim)
    steps = math.ceil(s_k / (ROW_WG // lanes * ROW_KEYS))
    return steps * (ROW_KEYS * head_dim + 1) + head_dim <= LOOP_BUDGET


def row_plan(head_dim: int) -> tuple[int, int]:
    """(lanes per key LK, dims per lane DL) of attention_decode_row for ``head_dim``."""
    lanes = 1 << (math.ceil(head_dim / ROW_DIMS) - 1).bit_length()
    return lanes, math.ceil(head_dim / lanes)


def _step_source(dims: int, keys: int, sub: bool) -> str:
    """One step of a key group: KEYS keys' loads, dot products, scores and the online softmax update,
    written out so that the loads are all issued before any is used and the values stay registers.
    Keys past the end read the last one's row again (cached; tried: rows up to the cache's capacity,
    so that the first step need not wait for the position read, was slower on an H100: those rows
    come from memory) and weigh 0."""
    out = []
    for u in range(keys):
        out += [f"        let j{u} = k0 + {u}u * G + g;",
                f"        let jc{u} = min(j{u}, k_end - 1u);",
                f"        let kr{u} = k_base + jc{u} * p.k_ss;",
                f"        let vr{u} = v_base + jc{u} * p.k_ss;"]
        out += [f"        let k{u}_{e} = dim_at(kr{u}, {e}u * LK + lane);" for e in range(dims)]
        out += [f"        let v{u}_{e} = dim_at(vr{u}, {e}u * LK + lane);" for e in range(dims)]
    for u in range(keys):
        terms = " + ".join(f"q{e} * k{u}_{e}" for e in range(dims))
        out.append(f"        var dot{u} = {terms};")
    if sub:
        out.append("        if (sg_size >= LK) {")
        out.append("            for (var off = 1u; off < LK; off = off << 1u) {")
        out += [f"                dot{u} = dot{u} + subgroupShuffleXor(dot{u}, off);" for u in range(keys)]
        out += ["            }", "        } else {"]
        out += [f"            dot{u} = full_dot(q_row, kr{u});" for u in range(keys)]
        out.append("        }")
    else:
        out += [f"        dot{u} = full_dot(q_row, kr{u});" for u in range(keys)]
    out += [f"        let s{u} = select(neg_inf(), masked_score(dot{u}, b, h, i, jc{u}, pos), j{u} < k_end);"
            for u in range(keys)]
    block = "s0"
    for u in range(1, keys):
        block = f"max({block}, s{u})"
    out += [f"        let m_new = max(m, {block});",
            "        let alpha = select(exp(m - m_new), 1.0, m == m_new);  // m = m_new = -inf: no NaN",
            "        m = m_new;"]
    # a -inf score (past the end, or an additive -inf) weighs 0 even while the max is still -inf
    out += [f"        let p{u} = select(exp(s{u} - m_new), 0.0, s{u} == neg_inf());" for u in range(keys)]
    out.append(f"        l = l * alpha + {' + '.join(f'p{u}' for u in range(keys))};")
    for e in range(dims):
        terms = " + ".join(f"p{u} * v{u}_{e}" for u in range(keys))
        out.append(f"        acc{e} = acc{e} * alpha + {terms};")
    return "\n".join(out)


def _merge_source(dims: int) -> str:
    """The subgroup's key groups merged by shuffles (lanes LK, 2 LK, ... apart hold the same dims of
    other groups): every group of the subgroup ends with the merged (max, sum, output). A group without
    keys (sum 0) weighs 0, so two of them give no -inf - -inf."""
    out = ["    if (sg_size > LK) {",
           "        span = sg_size;",
           "        for (var off = LK; off < sg_size; off = off << 1u) {",
           "            let m_o = subgroupShuffleXor(m, off);",
           "            let l_o = subgroupShuffleXor(l, off);"]
    out += [f"            let acc{e}_o = subgroupShuffleXor(acc{e}, off);" for e in range(dims)]
    out += ["            let m_n = max(m, m_o);",
            "            let a = select(exp(m - m_n), 0.0, l == 0.0);",
            "            let b = select(exp(m_o - m_n), 0.0, l_o == 0.0);",
            "            m = m_n;",
            "            l = l * a + l_o * b;"]
    out += [f"            acc{e} = acc{e} * a + acc{e}_o * b;" for e in range(dims)]
    out += ["        }", "    }"]
    return "\n".join(out)


def row_source(head_dim: int, sub: bool, keys: int | None = None) -> dict[str, str]:
    """attention_decode_row's generated parts and constants for ``head_dim``; ``sub``: subgroup sums;
    ``keys`` per group and step (default ROW_KEYS)."""
    lanes, dims = row_plan(head_dim)
    keys = keys or ROW_KEYS
    q_load = [f"    let q{e} = dim_at(q_row, {e}u * LK + lane);" for e in range(dims)]
    q_load += [f"    var acc{e} = 0.0;" for e in range(dims)]
    store = [f"        part_acc[slot * LK * DL + {e}u * LK + lane] = acc{e};" for e in range(dims)]
    return {"LK": lanes, "DL": dims, "KEYS": keys, "EXACT": "true" if lanes * dims == head_dim else "false",
            "Q_LOAD": "\n".join(q_load),
            "KEY_STEP": _step_source(dims, keys, sub), "ACC_STORE": "\n".join(store),
            "GROUP_MERGE": _merge_source(dims) if sub and GROUP_MERGE else "",
            "SG_ARGS": ", @builtin(subgroup_size) sg_size: u32" if sub else ""}


def decode_row_step(node: Node, ctx: LowerCtx, fields: dict, subs: dict, batch: int, heads: int,
                    head_dim: int, operands: Sequence[Node] | None) -> Step:
    """The attention_decode_row dispatch: grid (heads x S_q, batch)."""
    sub = USE_SUBGROUPS and "subgroup" in ctx.facts.features
    grid = (heads * fields["s_q"], batch, 1)
    return ctx.dispatch(ATTENTION_DECODE_ROW, node, grid, {**subs, **row_source(head_dim, sub)},
                        operands=operands, **fields, heads=heads)

"""Attention prefill for short heads: attention_flash_rows (one query row per invocation).

attention_flash (lowering/attention.py) gives a workgroup 64 queries as a 16 x 16 grid of threads
that share each score row through workgroup memory: about a dozen barriers per 32-key tile, and
for a 128-token prefill chunk of a 9-head model only 18 workgroups. For head_dim <= 64 (a multiple
of 4) a query row's q and output fit one invocation's registers, so attention_flash_rows keeps them
there: no score is reduced across invocations, each K/V block costs two barriers, and a workgroup
of 32 queries splits its keys SPLITS ways (merged once at the end) to put more warps on the GPU.
Same params, semantics and masks as attention_flash (include/attention_mask.wgsl).
"""

from __future__ import annotations

import math

from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, fits

#: The uniform fields every attention kernel shares (attention_flash's params; lowering/attention.py
#: adds the decode kernels' own)
ATTENTION_FIELDS = dict(
    s_q=U32, s_k=U32, kv_len=U32, group=U32, q=U32, k=U32, v=U32, o=U32, mask=U32,
    q_sb=U32, q_sh=U32, q_ss=U32, o_sb=U32, o_sh=U32, o_ss=U32, k_sb=U32, k_sh=U32, k_ss=U32,
    m_sb=U32, m_sh=U32, m_sq=U32, m_sk=U32, scale=F32, softcap=F32, window=U32, kv_pos=U32, kv_dyn=U32,
)
ATTENTION_FLASH_PARAMS = params("AttentionFlashParams", ("kv_len",), **ATTENTION_FIELDS)
#: q, k, v (or the packed parent, three times: ``operands``) are f32; a mask any word type, pos i32
ATTENTION_DTYPES = accepts(DType.F32, DType.F32, DType.F32, out=DType.F32)

ROWS_MAX_DIM = 64  # registers: q and the output row, 2 x head_dim floats per invocation
ROWS_QUERIES = 32  # queries per workgroup (its BQ): one warp per key split
ROWS_SPLITS = 4  # key splits per workgroup
ROWS_KEYS = 8  # keys per split and block (BKEYS = 32 >= BQ, as the merge needs)
ATTENTION_FLASH_ROWS = kernel(
    "attention_flash_rows", ATTENTION_FLASH_PARAMS, dtypes=ATTENTION_DTYPES,
    workgroup=(ROWS_QUERIES * ROWS_SPLITS, 1, 1),
    # K and V blocks: BKEYS rows of D floats each
    shared_bytes=lambda s: 2 * 4 * int(s["SPLITS"]) * int(s["KT"]) * int(s["D"]),
    sizes={"SPLITS": ROWS_SPLITS, "KT": ROWS_KEYS, "D": ROWS_MAX_DIM},
    # no runtime checks: block indices stay under BKEYS * DV (the staging is guarded where the block
    # is not a whole number of loads), global reads clamped in load_kv; prefill 4% faster on an H100
    checked=False,
)


def rows_fit(head_dim: int) -> bool:
    return head_dim <= ROWS_MAX_DIM and head_dim % 4 == 0


def rows_source(head_dim: int, splits: int = ROWS_SPLITS, keys: int = ROWS_KEYS) -> dict[str, str]:
    """attention_flash_rows' generated parts, written out so that q, the output row and the staged
    block stay registers (loops over private arrays may live in local memory)."""
    dv = head_dim // 4
    threads = ROWS_QUERIES * splits
    loads = math.ceil(splits * keys * dv / threads)
    exact = loads * threads == splits * keys * dv
    vec = range(dv)
    decl = [f"    let qv{c} = vec4<f32>(ld_f32(qa + {4 * c}u), ld_f32(qa + {4 * c + 1}u), "
            f"ld_f32(qa + {4 * c + 2}u), ld_f32(qa + {4 * c + 3}u));" for c in vec]
    decl += [f"    var acc{c} = vec4<f32>(0.0);" for c in vec]
    decl += [f"    var kx{n}: vec4<f32>;\n    var vx{n}: vec4<f32>;" for n in range(loads)]

    def fetch(start: str, indent: str) -> list[str]:
        out = []
        for n in range(loads):
            out += [f"{indent}kx{n} = load_kv(k_base, t + {n * threads}u, {start}, k_end);",
                    f"{indent}vx{n} = load_kv(v_base, t + {n * threads}u, {start}, k_end);"]
        return out

    put = []
    for n in range(loads):
        f = f"t + {n * threads}u"
        body = [f"ks[{f}] = kx{n};", f"vs[{f}] = vx{n};"]
        put += ([f"        {s}" for s in body] if exact else
                [f"        if ({f} < BKEYS * DV) {{", *[f"            {s}" for s in body], "        }"])
    scores = []
    for j in range(keys):
        scores.append(f"        var d{j} = qv0 * ks[kr + {j * dv}u];")
        scores += [f"        d{j} = fma(qv{c}, ks[kr + {j * dv + c}u], d{j});" for c in range(1, dv)]
        dot = f"(d{j}.x + d{j}.y) + (d{j}.z + d{j}.w)"
        scores.append(f"        let s{j} = select(neg_inf(), masked_score({dot}, b, h, i, j0 + {j}u, pos), "
                      f"j0 + {j}u < k_end);")
    block_max = f"s{keys - 1}"
    for j in reversed(range(keys - 1)):
        block_max = f"max(s{j}, {block_max})"
    weights = [f"        let w{j} = select(0.0, exp(s{j} - m_new), live);" for j in range(keys)]
    pv = []
    for c in vec:
        term = f"acc{c} * alpha"
        for j in range(keys):
            term = f"fma(vec4<f32>(w{j}), vs[kr + {j * dv + c}u], {term})"
        pv.append(f"        acc{c} = {term};")
    store = []
    for c in vec:
        store.append(f"        let o{c} = select(acc{c} / l, vec4<f32>(0.0), l == 0.0);")
        store += [f"        st_f32(oa + {4 * c + e}u, o{c}.{'xyzw'[e]});" for e in range(4)]
    return {
        "DECL": "\n".join(decl), "FETCH": "\n".join(fetch("k0", "    ")),
        "FETCH_NEXT": "\n".join(fetch("next", "        ")), "PUT": "\n".join(put),
        "SCORES": "\n".join(scores), "BLOCK_MAX": block_max, "WEIGHTS": "\n".join(weights),
        "WEIGHT_SUM": " + ".join(f"w{j}" for j in range(keys)), "PV": "\n".join(pv),
        "HAND": "\n".join(f"            ks[qi * DV + {c}u] = acc{c};" for c in vec),
        "TAKE": "\n".join(f"            acc{c} = acc{c} * wa + ks[qi * DV + {c}u] * wb;" for c in vec),
        "STORE": "\n".join(store),
    }


def flash_rows_step(node: Node, ctx: LowerCtx, fields: dict, subs: dict, batch: int, heads: int,
                    operands: list[Node] | None) -> Step | None:
    """The attention_flash_rows step, or None where it does not apply (long heads, or a device
    whose workgroup memory is too small) and attention_flash runs instead."""
    head_dim = int(subs["D"])
    if not rows_fit(head_dim):
        return None
    rows_subs = {**subs, "SPLITS": ROWS_SPLITS, "KT": ROWS_KEYS, "WG": ROWS_QUERIES * ROWS_SPLITS,
                 **rows_source(head_dim, ROWS_SPLITS, ROWS_KEYS)}  # the plan's values, as set now
    if not fits(ATTENTION_FLASH_ROWS, ctx.facts, rows_subs):
        return None
    grid = (math.ceil(fields["s_q"] / ROWS_QUERIES), heads, batch)
    return ctx.dispatch(ATTENTION_FLASH_ROWS, node, grid, rows_subs, operands=operands, **fields)

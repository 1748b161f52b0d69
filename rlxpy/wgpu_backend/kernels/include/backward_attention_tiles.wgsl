// Shared by the attention backward kernels (backward_attention_*): blocks of 64 rows against tiles of 32
// columns, thread (ty, tx) of a 16 x 16 workgroup owning rows ty + 16a (a < 4, the lanes of a vec4) and
// columns tx + 16c (c < 2, the two columns of a mat2x4), as in attention_flash; the score semantics of
// Attention with its gradient factor; the causal key ranges. Needs the params fields of
// attention_mask.wgsl; declares the kernels' sizes (from the placeholders D, MASK_KIND, UD, KC) and their
// workgroup arrays: tiles (staged chunks) and ps (a 64 x 33 block of P or dS, or row partials).
#include "common_words.wgsl"

const D: u32 = {{D}}u;  // head_dim
const MASK_KIND: u32 = {{MASK_KIND}}u;
const UD: u32 = {{UD}}u;  // ceil(D / 16) head dims per thread and row
const KC: u32 = {{KC}}u;  // rows per staged chunk of all D dims (stage_rows)

var<workgroup> tiles: array<f32, 1632>;
var<workgroup> ps: array<f32, 2112>;

#include "attention_mask.wgsl"
#include "attention_block_value.wgsl"

const BR: u32 = 64u;  // rows per block (queries, or keys for dK/dV)
const BC: u32 = 32u;  // columns per tile (keys, or queries)
const DS: u32 = 16u;  // head dims per staged chunk of a dot product
const QS: u32 = DS + 1u;  // padded strides: lanes reading different rows hit different banks
const VS: u32 = D + 1u;
const PS: u32 = BC + 1u;

// A query-major workgroup (stats, dQ): 64 queries from q0 of head h, batch b, and where its tensors start.
struct QueryBlock {
    t: vec2<u32>,  // (tx, ty)
    h: u32,
    b: u32,
    q0: u32,
    q_base: u32,
    o_base: u32,  // dO
    k_base: u32,
    v_base: u32,
    shift: i32,  // query i sits at key position shift + i (bottom-right causal alignment)
    first_row: u32,  // the statistics row of query 0 of (b, h)
}

fn query_block(lane: u32, wid: vec3<u32>) -> QueryBlock {
    let h = wid.y;
    let b = wid.z;
    let hk = h / p.group;  // GQA: query head h reads kv head h // (H / H_kv)
    return QueryBlock(vec2<u32>(lane % 16u, lane / 16u), h, b, wid.x * BR, p.q + b * p.q_sb + h * p.q_sh,
                      p.dy + b * p.q_sb + h * p.q_sh, p.k + b * p.k_sb + hk * p.k_sh, p.v + b * p.k_sb + hk * p.k_sh,
                      i32(p.s_k) - i32(p.s_q), (b * p.heads + h) * p.s_q);
}

// a[a_row0 + ty + 16a] . b[b_row0 + tx + 16c] over the head dims, for a < 4 (vec4 lanes) and c < 2
// (columns): 64 rows of a and 32 of b staged 16 dims at a time through tiles. Uniform control flow.
fn dot_block(t: vec2<u32>, a: u32, a_stride: u32, a_row0: u32, a_end: u32, b: u32, b_stride: u32, b_row0: u32,
             b_end: u32) -> mat2x4<f32> {
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    let lane = t.y * 16u + t.x;
    for (var d0 = 0u; d0 < D; d0 += DS) {
        workgroupBarrier();
        stage_blocks(lane, a, a_stride, a_row0, a_end, b, b_stride, b_row0, b_end, d0, BR * QS);
        workgroupBarrier();
        for (var dd = 0u; dd < min(DS, D - d0); dd++) {
            let a4 = vec4<f32>(tiles[t.y * QS + dd], tiles[(t.y + 16u) * QS + dd], tiles[(t.y + 32u) * QS + dd],
                               tiles[(t.y + 48u) * QS + dd]);
            s0 += a4 * tiles[BR * QS + t.x * QS + dd];
            s1 += a4 * tiles[BR * QS + (t.x + 16u) * QS + dd];
        }
    }
    return mat2x4<f32>(s0, s1);
}

// rows row0 .. row0 + KC of a tensor, all D dims, into tiles at stride VS (zeros past rows_end)
fn stage_rows(lane: u32, base: u32, stride: u32, row0: u32, rows_end: u32) {
    for (var e = lane; e < KC * D; e += 256u) {
        tiles[e / D * VS + e % D] = block_value(base, stride, row0, rows_end, 0u, D, e);
    }
}

// acc[u] += sum over the KC columns c0.. of ps[row][c0 + kk] * tiles[kk][tx + 16u], for the four rows of
// the thread (vec4 lanes): the weights of ps times rows staged by stage_rows. Uniform control flow.
fn accumulate(t: vec2<u32>, c0: u32, acc: ptr<function, array<vec4<f32>, UD>>) {
    for (var kk = 0u; kk < KC; kk++) {
        let w = vec4<f32>(ps[t.y * PS + c0 + kk], ps[(t.y + 16u) * PS + c0 + kk], ps[(t.y + 32u) * PS + c0 + kk],
                          ps[(t.y + 48u) * PS + c0 + kk]);
        for (var u = 0u; u < UD; u++) {
            (*acc)[u] += w * tiles[kk * VS + t.x + 16u * u];
        }
    }
}

// (score, factor) of query i (absolute position pos) and key j: the score as ref_attention forms it
// (scale, softcap, mask), and d score / d (q.k) / scale: 0 where the mask replaced the score, the
// softcap's 1 - tanh^2, else 1.
fn score_factor(dot: f32, b: u32, h: u32, i: u32, j: u32, pos: i32) -> vec2<f32> {
    let s = masked_score(dot, b, h, i, j, pos);
    var factor = 1.0;
    if (p.softcap != 0.0) {
        let th = tanh_safe(dot * p.scale / p.softcap);
        factor = 1.0 - th * th;
    }
    if (MASK_KIND == 1u || MASK_KIND == 3u) {
        var keep = i32(j) <= pos;
        if (MASK_KIND == 3u) {
            keep = keep && i32(j) >= pos - i32(p.window);
        }
        factor = select(0.0, factor, keep);
    } else if (MASK_KIND == 2u) {
        factor = select(factor, 0.0, mask_value(p.mask + b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk) < 0.5);
    }
    return vec2<f32>(s, factor);
}

// [first, end) of the keys a block of BR queries from q0 can see (visible_keys), the first rounded down
// to a tile.
fn key_range(q0: u32, shift: i32) -> vec2<u32> {
    let keys = visible_keys(shift + i32(q0), shift + i32(min(q0 + BR, p.s_q)) - 1, p.s_k);
    return vec2<u32>(keys.x / BC * BC, keys.y);
}

// [first, last) of the keys a query block reads in this dispatch: its key_range within the dispatch's
// tiles [start, start + count).
fn block_keys(qb: QueryBlock) -> vec2<u32> {
    let keys = key_range(qb.q0, qb.shift);
    return vec2<u32>(max(keys.x, p.start * BC), min(keys.y, (p.start + p.count) * BC));
}

// whether the BC queries from i0 see none of the keys [j0, j0 + BR) (and no row of them is fully masked)
fn queries_skip_keys(i0: u32, j0: u32, shift: i32) -> bool {
    if (MASK_KIND != 1u && MASK_KIND != 3u) {
        return false;
    }
    let top = shift + i32(i0);
    let bottom = shift + i32(min(i0 + BC, p.s_q)) - 1;
    if (top < 0) {
        return false;
    }
    let before = bottom < i32(j0);
    let after = MASK_KIND == 3u && top - i32(p.window) > i32(j0 + BR) - 1;
    return before || after;
}

// Shared by the attention backward kernels (backward_attention_*): register-tiled products of a block of
// 64 rows against a tile of 32 columns, 16 x 16 threads. Thread (tx, ty) owns rows 4 ty + a (a < 4, the
// lanes of a vec4) and columns 2 tx + c (c < 2, the columns of a mat2x4) of a score block, and rows
// 4 ty + a, head dims 64 g + 4 tx + e (g < DG, e < 4) of a gradient block, so every workgroup-memory read
// in the sums is a vec4 (or a pair of words) shared by 16 threads. Operands are staged in steps (KT head
// dims, or KS rows): the next step is loaded into registers before this one is summed and stored into the
// other of two buffers, one barrier per step. The sums are written out by the lowerer (placeholders
// SCORE_SUMS, ROW_SUMS, STORE_GRADS). Also the score semantics of Attention with its gradient factor and the causal key
// ranges. Needs the params fields of attention_mask.wgsl and the placeholders D, MASK_KIND, DG.
#include "common_words.wgsl"

const D: u32 = {{D}}u;  // head_dim
const MASK_KIND: u32 = {{MASK_KIND}}u;
const DG: u32 = {{DG}}u;  // ceil(D / 64): 4-dim vec4s per thread and row of a gradient block
const DP: u32 = 64u * DG;  // head dims a gradient block covers (D padded)
const U: u32 = {{U}}u;  // staging unit (1, 2 or 4, as workgroup memory allows): 8 U head dims per score step
const KT: u32 = 8u * U;  // head dims per step of a score product
const KS: u32 = {{KS}}u;  // rows of the right operand per step of a row product (a power of two)
const BR: u32 = 64u;  // rows per block (queries, or keys for dK/dV)
const BC: u32 = 32u;  // columns per tile (keys, or queries)
const SA_HALF: u32 = 128u * U;  // vec4s of one staging buffer of sa
const SB_HALF: u32 = 256u * U;  // words of one staging buffer of sb
const SCORE_QUADS: u32 = 192u * U;  // 4-dim loads per score step: 2 U per left row, then per right row
const ROW_QUADS: u32 = KS * DP / 4u;  // 4-dim loads per row-product step

// [2][KT][BR / 4]: the left rows of a score product, dim-major, 4 rows a vec4; or [2][KS][DP / 4]: the
// right rows of a row product
var<workgroup> sa: array<vec4<f32>, {{SA_VECS}}>;
var<workgroup> sb: array<f32, {{SB_WORDS}}>;  // [2][KT][BC]: the right rows of a score product, dim-major
var<workgroup> sp: array<vec4<f32>, 512>;  // [BC][BR / 4]: P or dS, column-major, the left of a row product

#include "attention_mask.wgsl"

// 4 dims d .. d + 3 of row `row` of a row-major tensor at base (row stride `stride`); 0 outside
// [0, rows_end) x [0, D). Branch-free (outside, it loads word `base` and drops it): a load under a branch
// is not hoisted before the sums.
fn row_quad(base: u32, stride: u32, row: u32, rows_end: u32, d: u32) -> vec4<f32> {
    let at = base + row * stride + d;
    let inside = row < rows_end;
    let ok = vec4<bool>(inside && d < D, inside && d + 1u < D, inside && d + 2u < D, inside && d + 3u < D);
    let x = vec4<f32>(ld_f32(select(base, at, ok.x)), ld_f32(select(base, at + 1u, ok.y)),
                      ld_f32(select(base, at + 2u, ok.z)), ld_f32(select(base, at + 3u, ok.w)));
    return select(vec4<f32>(0.0), x, ok);
}

// One 4-dim load of a score step (id = lane + 256 n): ids < 128 U a left row's, then 64 U a right row's,
// the rest nothing (rows_end 0).
struct ScoreShare {
    left: bool,
    right: bool,
    row: u32,  // within the block
    dk: u32,
    base: u32,
    stride: u32,
    at: u32,  // the row in the tensor
    end: u32,
}

fn score_share(id: u32, a: u32, a_stride: u32, a_row0: u32, a_end: u32, b: u32, b_stride: u32, b_row0: u32,
               b_end: u32) -> ScoreShare {
    let left = id < 128u * U;
    let right = !left && id < SCORE_QUADS;
    let rid = select(id - 128u * U, id, left);
    let row = rid / (2u * U);
    return ScoreShare(left, right, row, (rid % (2u * U)) * 4u, select(b, a, left), select(b_stride, a_stride, left),
                      select(b_row0, a_row0, left) + row, select(select(0u, b_end, right), a_end, left));
}

fn score_load(s: ScoreShare, d0: u32) -> vec4<f32> {
    return row_quad(s.base, s.stride, s.at, s.end, d0 + s.dk);
}

fn score_put(half: u32, s: ScoreShare, v: vec4<f32>) {
    for (var e = 0u; e < 4u; e++) {
        if (s.left) {
            sa[half * SA_HALF + (s.dk + e) * (BR / 4u) + s.row / 4u][s.row % 4u] = v[e];
        }
        if (s.right) {
            sb[half * SB_HALF + (s.dk + e) * BC + s.row] = v[e];
        }
    }
}

// a[a_row0 + 4 ty + a] . b[b_row0 + 2 tx + c] over the head dims (rows past a_end / b_end are 0), for
// a < 4 (vec4 lanes), c < 2 (columns). Each thread stages up to 3 loads a step (q0 .. q2, as many as
// SCORE_QUADS needs). Call from uniform control flow (it has barriers).
fn score_block(t: vec2<u32>, lane: u32, a: u32, a_stride: u32, a_row0: u32, a_end: u32, b: u32, b_stride: u32,
               b_row0: u32, b_end: u32) -> mat2x4<f32> {
    let q0 = score_share(lane, a, a_stride, a_row0, a_end, b, b_stride, b_row0, b_end);
    let q1 = score_share(lane + 256u, a, a_stride, a_row0, a_end, b, b_stride, b_row0, b_end);
    let q2 = score_share(lane + 512u, a, a_stride, a_row0, a_end, b, b_stride, b_row0, b_end);
    var v0 = score_load(q0, 0u);
    var v1 = vec4<f32>(0.0);
    var v2 = vec4<f32>(0.0);
    if (SCORE_QUADS > 256u) {
        v1 = score_load(q1, 0u);
    }
    if (SCORE_QUADS > 512u) {
        v2 = score_load(q2, 0u);
    }
    workgroupBarrier();  // every thread is done with the buffers
    score_put(0u, q0, v0);
    score_put(0u, q1, v1);
    score_put(0u, q2, v2);
    workgroupBarrier();
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    let steps = (D + KT - 1u) / KT;
    for (var step = 0u; step < steps; step++) {
        let ahead = step + 1u < steps;
        if (ahead) {
            v0 = score_load(q0, (step + 1u) * KT);
            if (SCORE_QUADS > 256u) {
                v1 = score_load(q1, (step + 1u) * KT);
            }
            if (SCORE_QUADS > 512u) {
                v2 = score_load(q2, (step + 1u) * KT);
            }
        }
        let ta = (step & 1u) * SA_HALF + t.y;
        let tb = (step & 1u) * SB_HALF + 2u * t.x;
{{SCORE_SUMS}}
        if (ahead) {  // the other buffer: every thread finished reading it before the last barrier
            let half = (step + 1u) & 1u;
            score_put(half, q0, v0);
            score_put(half, q1, v1);
            score_put(half, q2, v2);
        }
        workgroupBarrier();
    }
    return mat2x4<f32>(s0, s1);
}

// P or dS of this thread's block (column c = x[c], rows in lanes) into sp for a row product
fn store_weights(t: vec2<u32>, x: mat2x4<f32>) {
    sp[(2u * t.x) * (BR / 4u) + t.y] = x[0];
    sp[(2u * t.x + 1u) * (BR / 4u) + t.y] = x[1];
}

// acc[DG a + g] (row 4 ty + a, dims 64 g + 4 tx ..+3) += sum over the BC columns c of sp[c][row] *
// R[row0 + c]: R the rows of the row-major tensor at base (rows past rows_end are 0), staged KS at a
// time (ROW_QUADS 4-dim loads a step: ids lane and lane + 256). Call from uniform control flow, after
// store_weights.
fn row_product(t: vec2<u32>, lane: u32, base: u32, stride: u32, row0: u32, rows_end: u32,
               acc: ptr<function, array<vec4<f32>, 4 * DG>>) {
    let id1 = lane + 256u;
    let loads0 = lane < ROW_QUADS;
    let loads1 = id1 < ROW_QUADS;
    let r0 = lane / (DP / 4u);
    let r1 = id1 / (DP / 4u);
    let d0 = (lane % (DP / 4u)) * 4u;
    let d1 = (id1 % (DP / 4u)) * 4u;
    let end0 = select(0u, rows_end, loads0);
    let end1 = select(0u, rows_end, loads1);
    var v0 = row_quad(base, stride, row0 + r0, end0, d0);
    var v1 = vec4<f32>(0.0);
    if (ROW_QUADS > 256u) {
        v1 = row_quad(base, stride, row0 + r1, end1, d1);
    }
    workgroupBarrier();  // every thread is done with sa; sp is published
    if (loads0) {
        sa[lane] = v0;
    }
    if (loads1) {
        sa[id1] = v1;
    }
    workgroupBarrier();
    let steps = BC / KS;
    for (var step = 0u; step < steps; step++) {
        let ahead = step + 1u < steps;
        if (ahead) {
            v0 = row_quad(base, stride, row0 + (step + 1u) * KS + r0, end0, d0);
            if (ROW_QUADS > 256u) {
                v1 = row_quad(base, stride, row0 + (step + 1u) * KS + r1, end1, d1);
            }
        }
        let tw = step * KS * (BR / 4u) + t.y;
        let tr = (step & 1u) * SA_HALF + t.x;
{{ROW_SUMS}}
        let half = ((step + 1u) & 1u) * SA_HALF;
        if (ahead && loads0) {
            sa[half + lane] = v0;
        }
        if (ahead && loads1) {
            sa[half + id1] = v1;
        }
        workgroupBarrier();
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

// score_factor of 4 rows (vec4 lanes) against their columns: the scores in [0], the factors in [1]
fn score_factor4(dots: vec4<f32>, b: u32, h: u32, i: vec4<u32>, j: vec4<u32>, shift: i32) -> mat2x4<f32> {
    let x = score_factor(dots.x, b, h, i.x, j.x, shift + i32(i.x));
    let y = score_factor(dots.y, b, h, i.y, j.y, shift + i32(i.y));
    let z = score_factor(dots.z, b, h, i.z, j.z, shift + i32(i.z));
    let w = score_factor(dots.w, b, h, i.w, j.w, shift + i32(i.w));
    return mat2x4<f32>(vec4<f32>(x.x, y.x, z.x, w.x), vec4<f32>(x.y, y.y, z.y, w.y));
}

// row `row` (skipped past rows_end), dims d0 .. d0 + 3 (those < D) of a gradient at out (row stride
// `stride`) = scale * v, added to what an earlier dispatch wrote (start > 0)
fn grad_out(out: u32, stride: u32, row: u32, rows_end: u32, d0: u32, scale: f32, v: vec4<f32>) {
    if (row >= rows_end) {
        return;
    }
    for (var e = 0u; e < 4u; e++) {
        if (d0 + e < D) {
            let at = out + row * stride + d0 + e;
            let before = select(0.0, ld_f32(at), p.start > 0u);
            st_f32(at, before + scale * v[e]);
        }
    }
}

// every accumulator of row_product through grad_out: rows row0 + a, dims d0 + 64 g (written out, so
// that acc stays in registers)
fn store_grads(acc: ptr<function, array<vec4<f32>, 4 * DG>>, out: u32, stride: u32, row0: u32, rows_end: u32,
               d0: u32, scale: f32) {
{{STORE_GRADS}}
}

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

// [first, last) of the keys a query block reads in this dispatch: the keys its BR queries can see
// (visible_keys, the first rounded down to a tile) within the dispatch's tiles [start, start + count).
fn block_keys(qb: QueryBlock) -> vec2<u32> {
    let keys = visible_keys(qb.shift + i32(qb.q0), qb.shift + i32(min(qb.q0 + BR, p.s_q)) - 1, p.s_k);
    return vec2<u32>(max(keys.x / BC * BC, p.start * BC), min(keys.y, (p.start + p.count) * BC));
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

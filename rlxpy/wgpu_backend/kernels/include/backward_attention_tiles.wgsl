// Shared by the attention backward kernels (backward_attention_*): 16 x 16 tiles of (row, col) pairs, one
// per thread (ty, tx) of a 256-thread workgroup, and the score semantics of Attention with its gradient
// factor. Needs the params fields of attention_mask.wgsl, the constant D (head_dim) and the workgroup
// arrays ta, tb (16 x 17 floats each).
#include "common_words.wgsl"
#include "attention_mask.wgsl"

const T: u32 = 16u;  // rows and columns of a tile, and head dims per chunk
const TS: u32 = 17u;  // padded row stride of the tile arrays

// sum over the head dims of a[a_row0 + ty] * b[b_row0 + tx]: rows of two tensors staged chunk by chunk
// through ta / tb (a row past a_end / b_end reads zeros). Call from uniform control flow.
fn dot_tile(t: vec2<u32>, a: u32, a_stride: u32, a_row0: u32, a_end: u32, b: u32, b_stride: u32, b_row0: u32,
            b_end: u32) -> f32 {
    var acc = 0.0;
    for (var d0 = 0u; d0 < D; d0 += T) {
        workgroupBarrier();
        var av = 0.0;
        var bv = 0.0;
        if (a_row0 + t.y < a_end && d0 + t.x < D) {
            av = ld_f32(a + (a_row0 + t.y) * a_stride + d0 + t.x);
        }
        if (b_row0 + t.y < b_end && d0 + t.x < D) {
            bv = ld_f32(b + (b_row0 + t.y) * b_stride + d0 + t.x);
        }
        ta[t.y * TS + t.x] = av;
        tb[t.y * TS + t.x] = bv;
        workgroupBarrier();
        for (var dd = 0u; dd < T; dd++) {
            acc += ta[t.y * TS + dd] * tb[t.x * TS + dd];
        }
    }
    return acc;
}

// (score, factor) of query i (absolute position pos) and key j: the score as ref_attention forms it
// (scale, softcap, mask), and d score / d (q.k) / scale: 0 where the mask replaced the score, the
// softcap's 1 - tanh^2, else 1.
fn score_factor(dot: f32, b: u32, h: u32, i: u32, j: u32, pos: i32) -> vec2<f32> {
    let s = masked_score(dot, b, h, i, j, pos);
    var factor = 1.0;
    if (p.softcap != 0.0) {
        let t = tanh_safe(dot * p.scale / p.softcap);
        factor = 1.0 - t * t;
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

// the probability of query row stats (m, l) at score s
fn prob(s: f32, m: f32, l: f32) -> f32 {
    return exp(s - m) / l;
}

// [first, end) of the keys a block of T queries from q0 can see (causal and sliding-window masks; the
// first rounded down to a tile): other keys get probability exactly 0, unless a row of the block is
// fully masked (it then averages every key, as the forward does), and then the block reads them all.
fn key_range(q0: u32, shift: i32) -> vec2<u32> {
    var first = 0u;
    var end = p.s_k;
    if (MASK_KIND == 1u || MASK_KIND == 3u) {
        let top = shift + i32(q0);
        let bottom = shift + i32(min(q0 + T, p.s_q)) - 1;
        if (top >= 0) {
            end = min(end, u32(bottom + 1));
            if (MASK_KIND == 3u) {
                first = u32(max(0, top - i32(p.window))) / T * T;
            }
        }
    }
    return vec2<u32>(first, end);
}

// whether the T queries from i0 see none of the keys [j0, j0 + T) (and no row of them is fully masked)
fn queries_skip_keys(i0: u32, j0: u32, shift: i32) -> bool {
    if (MASK_KIND != 1u && MASK_KIND != 3u) {
        return false;
    }
    let top = shift + i32(i0);
    let bottom = shift + i32(min(i0 + T, p.s_q)) - 1;
    if (top < 0) {
        return false;
    }
    let before = bottom < i32(j0);
    let after = MASK_KIND == 3u && top - i32(p.window) > i32(j0 + T) - 1;
    return before || after;
}

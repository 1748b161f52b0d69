// Flash attention, f32: out = softmax(mask(softcap(scale * q k^T))) v, online softmax over K/V tiles.
// Workgroup = (block of 64 queries, head, batch), threads 16 x 16: thread (ty, tx) owns query rows ty + 16a
// (a < 4, the lanes of its vec4s), keys tx + 16c (c < 2) of each 32-key tile, output dims tx + 16u.
// Bindings: 0 = arena window (u32 words), 1 = AttentionFlashParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const D: u32 = {{D}}u;  // head_dim
const BQ: u32 = 64u;  // queries per workgroup
const BK: u32 = 32u;  // keys per tile
const DS: u32 = 16u;  // head dims per Q/K chunk (score phase)
const KC: u32 = {{KC}}u;  // keys per V chunk (all D dims of each key; KC * D <= 1024)
const QS: u32 = DS + 1u;  // padded row strides: lanes reading different rows hit different banks
const VS: u32 = D + 1u;
const PS: u32 = BK + 1u;
const UD: u32 = {{UD}}u;  // ceil(D / 16) output dims per thread and row
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

// Q chunk [BQ][QS] then K chunk [BK][QS] during scores; V chunk [KC][VS] during p * v
var<workgroup> tiles: array<f32, 1632>;
// probabilities [BQ][PS]; before that, the per-thread row maxima [BQ][16]
var<workgroup> ps: array<f32, 2112>;

#include "attention_mask.wgsl"
#include "attention_kv_extent.wgsl"

#include "attention_block_value.wgsl"

fn store_v(e: u32, x: f32) {
    if (e < KC * D) {
        tiles[e / D * VS + e % D] = x;
    }
}

// V chunk (KC keys x D dims <= 1024 values, up to 4 per thread)
fn load_v(t: u32, v_base: u32, k0: u32, k_end: u32) {
    let v_a = select(0.0, block_value(v_base, p.k_ss, k0, k_end, 0u, D, t), t < KC * D);
    let v_b = select(0.0, block_value(v_base, p.k_ss, k0, k_end, 0u, D, t + 256u), t + 256u < KC * D);
    let v_c = select(0.0, block_value(v_base, p.k_ss, k0, k_end, 0u, D, t + 512u), t + 512u < KC * D);
    let v_d = select(0.0, block_value(v_base, p.k_ss, k0, k_end, 0u, D, t + 768u), t + 768u < KC * D);
    store_v(t, v_a);
    store_v(t + 256u, v_b);
    store_v(t + 512u, v_c);
    store_v(t + 768u, v_d);
}

fn rows4(base: u32, stride: u32) -> vec4<f32> {
    return vec4<f32>(ps[base], ps[base + stride], ps[base + 2u * stride], ps[base + 3u * stride]);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = t % 16u;
    let ty = t / 16u;
    let h = wid.y;
    let b = wid.z;
    let hk = h / p.group;  // GQA: query head h reads kv head h // (H / H_kv)
    let q0 = wid.x * BQ;
    let q_base = p.q + b * p.q_sb + h * p.q_sh;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    let kv_total = kv_extent(b);  // keys past it (an unfilled KV cache) are never read
    let shift = i32(kv_total) - i32(p.s_q);
    let keys = visible_keys(shift + i32(q0), shift + i32(min(q0 + BQ, p.s_q)) - 1, kv_total);
    let k_begin = keys.x;
    let k_end = keys.y;
    var m = vec4<f32>(neg_inf());
    var l = vec4<f32>(0.0);
    var acc: array<vec4<f32>, UD>;  // output dims tx + 16u of the four rows
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        // scores of rows ty + 16a against keys tx and tx + 16 (explicit zeros: a declaration in a
        // loop body is not reliably re-zeroed on every iteration)
        var s0 = vec4<f32>(0.0);
        var s1 = vec4<f32>(0.0);
        for (var d0 = 0u; d0 < D; d0 += DS) {
            workgroupBarrier();
            stage_blocks(t, q_base, p.q_ss, q0, p.s_q, k_base, p.k_ss, k0, k_end, d0, BQ * QS);  // Q and K chunks
            workgroupBarrier();
            for (var dd = 0u; dd < min(DS, D - d0); dd++) {
                let q4 = vec4<f32>(tiles[ty * QS + dd], tiles[(ty + 16u) * QS + dd], tiles[(ty + 32u) * QS + dd],
                                   tiles[(ty + 48u) * QS + dd]);
                s0 += q4 * tiles[BQ * QS + tx * QS + dd];
                s1 += q4 * tiles[BQ * QS + (tx + 16u) * QS + dd];
            }
        }
        let j0 = k0 + tx;
        let j1 = k0 + tx + 16u;
        for (var a = 0u; a < 4u; a++) {
            let i = min(q0 + ty + 16u * a, p.s_q - 1u);  // padding rows past S_q read a valid mask row
            let pos = shift + i32(q0 + ty + 16u * a);
            if (j0 < k_end) {
                s0[a] = masked_score(s0[a], b, h, i, j0, pos);
            }
            if (j1 < k_end) {
                s1[a] = masked_score(s1[a], b, h, i, j1, pos);
            }
        }
        s0 = select(vec4<f32>(neg_inf()), s0, j0 < k_end);
        s1 = select(vec4<f32>(neg_inf()), s1, j1 < k_end);
        // row maxima: each thread's pair, then the 16 threads of a row through workgroup memory
        let pair_max = max(s0, s1);
        for (var a = 0u; a < 4u; a++) {
            ps[(ty + 16u * a) * 16u + tx] = pair_max[a];
        }
        workgroupBarrier();
        var tile_max = vec4<f32>(neg_inf());
        for (var x = 0u; x < 16u; x++) {
            tile_max = max(tile_max, rows4(ty * 16u + x, 256u));
        }
        let m_new = max(m, tile_max);
        let alpha = exp(m - m_new);
        m = m_new;
        workgroupBarrier();
        let p0 = select(vec4<f32>(0.0), exp(s0 - m), j0 < k_end);
        let p1 = select(vec4<f32>(0.0), exp(s1 - m), j1 < k_end);
        for (var a = 0u; a < 4u; a++) {
            ps[(ty + 16u * a) * PS + tx] = p0[a];
            ps[(ty + 16u * a) * PS + tx + 16u] = p1[a];
        }
        l *= alpha;
        for (var u = 0u; u < UD; u++) {
            acc[u] *= alpha;
        }
        for (var c0 = 0u; c0 < BK; c0 += KC) {
            workgroupBarrier();  // also publishes the probabilities on the first pass
            load_v(t, v_base, k0 + c0, k_end);
            workgroupBarrier();
            for (var kk = 0u; kk < KC; kk++) {
                let p4 = rows4(ty * PS + c0 + kk, 16u * PS);
                l += p4;
                for (var u = 0u; u < UD; u++) {
                    acc[u] += p4 * tiles[kk * VS + tx + 16u * u];
                }
            }
        }
    }
    for (var a = 0u; a < 4u; a++) {
        let i = q0 + ty + 16u * a;
        if (i < p.s_q) {
            let o_base = p.o + b * p.o_sb + h * p.o_sh + i * p.o_ss;
            for (var u = 0u; u < UD; u++) {
                let d = tx + 16u * u;
                if (d < D) {
                    st_f32(o_base + d, select(acc[u][a] / l[a], 0.0, l[a] == 0.0));
                }
            }
        }
    }
}

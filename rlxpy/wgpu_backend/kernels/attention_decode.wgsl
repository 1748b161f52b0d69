// Attention for few queries (decode), f32: the query rows sharing a kv head (GQA group x S_q, ROWS at a
// time) read each K/V row together. Workgroup = (key split, kv head + H_kv * row chunk, batch); per 64-key
// tile, thread (key t / 4, part t % 4) loads dims part + 4n of its key in one batch, then thread
// (g = t / D, d = t % D) loads v of keys g + DG n in one batch; split partials go to attention_combine.
// Bindings: 0 = arena window (u32 words), 1 = AttentionDecodeParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const D: u32 = {{D}}u;  // head_dim
const DG: u32 = {{DG}}u;  // key groups in the p * v phase: floor(WG / D)
const ROWS: u32 = {{ROWS}}u;  // query rows per workgroup: 4 or 8 (one or two vec4s of rows)
const RQ: u32 = ROWS / 4u;
const QD: u32 = {{QD}}u;  // D rounded up to a multiple of 4
const TK: u32 = 64u;  // keys per tile
const WG: u32 = 256u;
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

var<workgroup> qs: array<vec4<f32>, {{QS_LEN}}>;  // [QD][RQ]: one dim of four query rows per vec4
var<workgroup> red_lo: array<vec4<f32>, 256>;  // partial dots of rows 0-3, then partial outputs
var<workgroup> red_hi: array<vec4<f32>, 256>;  // the same for rows 4-7
var<workgroup> ps_lo: array<vec4<f32>, 64>;  // the tile's scores, then probabilities, rows 0-3
var<workgroup> ps_hi: array<vec4<f32>, 64>;

#include "attention_mask.wgsl"
#include "attention_kv_extent.wgsl"

// head of row rr of the kv head's group (rows enumerate (head in group, query))
fn row_head(hk: u32, rr: u32) -> u32 {
    return hk * p.group + rr / p.s_q;
}

fn key_dim(row: u32, d: u32) -> f32 {
    return select(0.0, ld_f32(row + min(d, D - 1u)), d < D);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let split = wid.x;
    let kv_heads = p.heads / p.group;
    let hk = wid.y % kv_heads;
    let r0 = (wid.y / kv_heads) * ROWS;  // first row of this workgroup's chunk
    let rows_total = p.group * p.s_q;
    let b = wid.z;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    for (var e = t; e < ROWS * QD; e += WG) {
        let r = e / QD;
        let d = e % QD;
        let rr = r0 + r;
        var x = 0.0;
        if (rr < rows_total && d < D) {
            x = ld_f32(p.q + b * p.q_sb + row_head(hk, rr) * p.q_sh + (rr % p.s_q) * p.q_ss + d);
        }
        qs[d * RQ + r / 4u][r % 4u] = x;
    }
    let kv_total = kv_extent(b);  // keys past it (an unfilled KV cache) are never read
    let shift = i32(kv_total) - i32(p.s_q);
    let chunk = (kv_total + p.splits - 1u) / p.splits;
    var k_begin = min(split * chunk, kv_total);
    var k_end = min(k_begin + chunk, kv_total);
    if (MASK_KIND == 1u || MASK_KIND == 3u) {
        var i_min = p.s_q;
        var i_max = 0u;
        for (var r = 0u; r < ROWS; r++) {
            if (r0 + r < rows_total) {
                i_min = min(i_min, (r0 + r) % p.s_q);
                i_max = max(i_max, (r0 + r) % p.s_q);
            }
        }
        // keys masked for every row add exactly 0, unless a row is fully masked (first < 0): that row
        // must average all keys, so the workgroup then reads them all
        let first = shift + i32(i_min);
        if (first >= 0) {
            k_end = min(k_end, u32(shift + i32(i_max) + 1));
            if (MASK_KIND == 3u) {
                k_begin = max(k_begin, u32(max(0, first - i32(p.window))));
            }
        }
    }
    let key = t / 4u;
    let part = t % 4u;
    let g = t / D;
    let d = t % D;
    var m_lo = vec4<f32>(neg_inf());
    var m_hi = vec4<f32>(neg_inf());
    var l_lo = vec4<f32>(0.0);
    var l_hi = vec4<f32>(0.0);
    var acc_lo = vec4<f32>(0.0);
    var acc_hi = vec4<f32>(0.0);
    workgroupBarrier();
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        // partial dots over dims part + 4n: every load of the batch is issued before the first use
        let k_row = k_base + min(k0 + key, k_end - 1u) * p.k_ss;
        var dot_lo = vec4<f32>(0.0);
        var dot_hi = vec4<f32>(0.0);
{{SCORE_BATCH}}
        red_lo[t] = dot_lo;
        red_hi[t] = dot_hi;
        workgroupBarrier();
        if (t < TK) {
            let j = k0 + t;
            var s_lo = vec4<f32>(neg_inf());
            var s_hi = vec4<f32>(neg_inf());
            if (j < k_end) {
                let dots_lo = red_lo[4u * t] + red_lo[4u * t + 1u] + red_lo[4u * t + 2u] + red_lo[4u * t + 3u];
                let dots_hi = red_hi[4u * t] + red_hi[4u * t + 1u] + red_hi[4u * t + 2u] + red_hi[4u * t + 3u];
                for (var r = 0u; r < ROWS; r++) {
                    let rr = r0 + r;
                    // rows past the group get score 0: finite, never written out
                    var sc = 0.0;
                    if (rr < rows_total) {
                        let i = rr % p.s_q;
                        let dot = select(dots_lo[r % 4u], dots_hi[r % 4u], r >= 4u);
                        sc = masked_score(dot, b, row_head(hk, rr), i, j, shift + i32(i));
                    }
                    if (r < 4u) {
                        s_lo[r] = sc;
                    } else {
                        s_hi[r - 4u] = sc;
                    }
                }
            }
            ps_lo[t] = s_lo;
            ps_hi[t] = s_hi;
        }
        workgroupBarrier();
        // every thread reads the 64 scores (broadcast) instead of a barrier-heavy tree
        var max_lo = vec4<f32>(neg_inf());
        var max_hi = vec4<f32>(neg_inf());
        for (var c = 0u; c < TK; c++) {
            max_lo = max(max_lo, ps_lo[c]);
            max_hi = max(max_hi, ps_hi[c]);
        }
        let m_lo_new = max(m_lo, max_lo);
        let m_hi_new = max(m_hi, max_hi);
        let alpha_lo = exp(m_lo - m_lo_new);
        let alpha_hi = exp(m_hi - m_hi_new);
        m_lo = m_lo_new;
        m_hi = m_hi_new;
        var p_lo = vec4<f32>(0.0);
        var p_hi = vec4<f32>(0.0);
        if (t < TK && k0 + t < k_end) {
            p_lo = exp(ps_lo[t] - m_lo);
            p_hi = exp(ps_hi[t] - m_hi);
        }
        workgroupBarrier();
        if (t < TK) {
            ps_lo[t] = p_lo;
            ps_hi[t] = p_hi;
        }
        workgroupBarrier();
        var sum_lo = vec4<f32>(0.0);
        var sum_hi = vec4<f32>(0.0);
        for (var c = 0u; c < TK; c++) {
            sum_lo += ps_lo[c];
            sum_hi += ps_hi[c];
        }
        l_lo = l_lo * alpha_lo + sum_lo;
        l_hi = l_hi * alpha_hi + sum_hi;
        acc_lo *= alpha_lo;
        acc_hi *= alpha_hi;
        if (g < DG) {
            // keys g + DG n of the tile; past the tile's end the address is clamped and p is 0
            let last = min(TK, k_end - k0) - 1u;
            let v_col = v_base + k0 * p.k_ss + d;
{{PV_BATCH}}
        }
        workgroupBarrier();
    }
    // sum the DG key groups' partial outputs
    red_lo[t] = select(vec4<f32>(0.0), acc_lo, g < DG);
    red_hi[t] = select(vec4<f32>(0.0), acc_hi, g < DG);
    workgroupBarrier();
    if (t < D) {
        var total_lo = vec4<f32>(0.0);
        var total_hi = vec4<f32>(0.0);
        for (var gg = 0u; gg < DG; gg++) {
            total_lo += red_lo[gg * D + t];
            total_hi += red_hi[gg * D + t];
        }
        for (var r = 0u; r < ROWS; r++) {
            let rr = r0 + r;
            if (rr < rows_total) {
                let h = row_head(hk, rr);
                let i = rr % p.s_q;
                let total = select(total_lo[r % 4u], total_hi[r % 4u], r >= 4u);
                let m = select(m_lo[r % 4u], m_hi[r % 4u], r >= 4u);
                let l = select(l_lo[r % 4u], l_hi[r % 4u], r >= 4u);
                if (p.splits == 1u) {
                    st_f32(p.o + b * p.o_sb + h * p.o_sh + i * p.o_ss + t, select(total / l, 0.0, l == 0.0));
                } else {
                    // partial record [acc[D], m, l] of (row, split), rescaled by the combine pass
                    let rec = p.part + (((b * p.heads + h) * p.s_q + i) * p.splits + split) * (D + 2u);
                    st_f32(rec + t, total);
                    if (t == 0u) {
                        st_f32(rec + D, m);
                        st_f32(rec + D + 1u, l);
                    }
                }
            }
        }
    }
}

// Attention for few queries (decode), f32: the query rows sharing a kv head (GQA group x S_q, four at a
// time) read each K/V row together. Workgroup = (key split, kv head + H_kv * row chunk, batch); keys go
// in blocks of 256: four lanes per key load its dims in straight-line batches, thread t scores key t,
// a block max and an online softmax over the blocks; then thread (g = t / DQ, quad dq = t % DQ) sums
// p * v over keys g + DG n for four dims. Split partials go to attention_combine.
// Bindings: 0 = arena window (u32 words), 1 = AttentionDecodeParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const D: u32 = {{D}}u;  // head_dim
const QD: u32 = {{QD}}u;  // D rounded up to a multiple of 4
const DQ: u32 = QD / 4u;  // dim quads
const DG: u32 = {{DG}}u;  // key groups of the p * v phase: floor(WG / DQ)
const TK: u32 = 256u;  // keys per block
const WG: u32 = 256u;
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

var<workgroup> qs: array<vec4<f32>, QD>;  // dim d of the four query rows
var<workgroup> ps: array<vec4<f32>, TK>;  // the block's probabilities, four rows per key
var<workgroup> red: array<vec4<f32>, WG>;  // one value per thread for the reductions
var<workgroup> red16: array<vec4<f32>, 16>;

#include "attention_mask.wgsl"
#include "attention_kv_extent.wgsl"

// head of row rr of the kv head's group (rows enumerate (head in group, query))
fn row_head(hk: u32, rr: u32) -> u32 {
    return hk * p.group + rr / p.s_q;
}

fn key_dim(row: u32, d: u32) -> f32 {
    return select(0.0, ld_f32(row + min(d, D - 1u)), d < D);
}

// max (is_max) or sum of every thread's v, returned to all threads: 256 -> 16 -> 1
fn reduce_all(v: vec4<f32>, t: u32, is_max: bool) -> vec4<f32> {
    red[t] = v;
    workgroupBarrier();
    if (t < 16u) {
        var a = red[16u * t];
        for (var i = 1u; i < 16u; i++) {
            a = select(a + red[16u * t + i], max(a, red[16u * t + i]), is_max);
        }
        red16[t] = a;
    }
    workgroupBarrier();
    var a = red16[0];
    for (var i = 1u; i < 16u; i++) {
        a = select(a + red16[i], max(a, red16[i]), is_max);
    }
    workgroupBarrier();  // red and red16 are free again
    return a;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let split = wid.x;
    let kv_heads = p.heads / p.group;
    let hk = wid.y % kv_heads;
    let r0 = (wid.y / kv_heads) * 4u;  // first row of this workgroup's chunk
    let rows_total = p.group * p.s_q;
    let b = wid.z;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    for (var e = t; e < 4u * QD; e += WG) {
        let r = e / QD;
        let d = e % QD;
        let rr = r0 + r;
        var x = 0.0;
        if (rr < rows_total && d < D) {
            x = ld_f32(p.q + b * p.q_sb + row_head(hk, rr) * p.q_sh + (rr % p.s_q) * p.q_ss + d);
        }
        qs[d][r] = x;
    }
    let kv_total = kv_extent(b);  // keys past it (an unfilled KV cache) are never read
    let shift = i32(kv_total) - i32(p.s_q);
    let chunk = (kv_total + p.splits - 1u) / p.splits;
    var k_begin = min(split * chunk, kv_total);
    var k_end = min(k_begin + chunk, kv_total);
    var i_min = p.s_q;
    var i_max = 0u;
    for (var r = 0u; r < 4u; r++) {
        if (r0 + r < rows_total) {
            i_min = min(i_min, (r0 + r) % p.s_q);
            i_max = max(i_max, (r0 + r) % p.s_q);
        }
    }
    let seen = visible_keys(shift + i32(i_min), shift + i32(i_max), k_end);
    k_begin = max(k_begin, seen.x);
    k_end = seen.y;
    let g = t / DQ;
    let dq = t % DQ;
    var m = vec4<f32>(neg_inf());
    var l = vec4<f32>(0.0);  // this thread's keys' share of the softmax sum
    var acc0 = vec4<f32>(0.0);  // dims 4 dq .. 4 dq + 3 (acc0..acc3), four rows each
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    workgroupBarrier();
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        // partial dots of key k0 + 64 s + t / 4 (s = 0..3) over dims part + 4 n: the four lanes of a key
        // read adjacent words (one key per lane made every load touch 32 rows); then thread t sums
        // the four parts of key k0 + t
        let kq = t / 4u;
        let part = t % 4u;
        var dot0 = vec4<f32>(0.0);
        var dot1 = vec4<f32>(0.0);
        var dot2 = vec4<f32>(0.0);
        var dot3 = vec4<f32>(0.0);
{{SCORE_BATCH}}
        let four = 4u * (t % 64u);
        red[t] = dot0;
        ps[t] = dot1;
        workgroupBarrier();
        var dot = vec4<f32>(0.0);
        if (t < 64u) {
            dot = red[four] + red[four + 1u] + red[four + 2u] + red[four + 3u];
        } else if (t < 128u) {
            dot = ps[four] + ps[four + 1u] + ps[four + 2u] + ps[four + 3u];
        }
        workgroupBarrier();
        red[t] = dot2;
        ps[t] = dot3;
        workgroupBarrier();
        if (t >= 192u) {
            dot = ps[four] + ps[four + 1u] + ps[four + 2u] + ps[four + 3u];
        } else if (t >= 128u) {
            dot = red[four] + red[four + 1u] + red[four + 2u] + red[four + 3u];
        }
        workgroupBarrier();
        let j = k0 + t;
        var s = vec4<f32>(neg_inf());
        if (j < k_end) {
            for (var r = 0u; r < 4u; r++) {
                let rr = r0 + r;
                // rows past the group get score 0: finite, never written out
                s[r] = 0.0;
                if (rr < rows_total) {
                    let i = rr % p.s_q;
                    s[r] = masked_score(dot[r], b, row_head(hk, rr), i, j, shift + i32(i));
                }
            }
        }
        let m_new = max(m, reduce_all(s, t, true));
        let alpha = exp(m - m_new);
        m = m_new;
        let pr = exp(s - m);  // 0 past k_end (s = -inf)
        l = l * alpha + pr;
        ps[t] = pr;
        workgroupBarrier();
        acc0 *= alpha;
        acc1 *= alpha;
        acc2 *= alpha;
        acc3 *= alpha;
        let n = min(TK, k_end - k0);
        if (g < DG) {
            let v_col = v_base + k0 * p.k_ss + 4u * dq;
            for (var c = g; c < n; c += 4u * DG) {
                // four keys c + DG u (past n: the address is clamped and p is 0), their loads issued first
{{PV_BATCH}}
            }
        }
        workgroupBarrier();
    }
    let total_l = reduce_all(l, t, false);
    var out = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var e = 0u; e < 4u; e++) {
        red[t] = select(vec4<f32>(0.0), out[e], g < DG);
        workgroupBarrier();
        let d = 4u * t + e;
        if (t < DQ && d < D) {
            var total = vec4<f32>(0.0);
            for (var gg = 0u; gg < DG; gg++) {
                total += red[gg * DQ + t];
            }
            for (var r = 0u; r < 4u; r++) {
                let rr = r0 + r;
                if (rr < rows_total) {
                    let h = row_head(hk, rr);
                    let i = rr % p.s_q;
                    if (p.splits == 1u) {
                        st_f32(p.o + b * p.o_sb + h * p.o_sh + i * p.o_ss + d,
                               select(total[r] / total_l[r], 0.0, total_l[r] == 0.0));
                    } else {
                        // partial record [acc[D], m, l] of (row, split), rescaled by the combine pass
                        let rec = p.part + (((b * p.heads + h) * p.s_q + i) * p.splits + split) * (D + 2u);
                        st_f32(rec + d, total[r]);
                        if (d == 0u) {
                            st_f32(rec + D, m[r]);
                            st_f32(rec + D + 1u, total_l[r]);
                        }
                    }
                }
            }
        }
        workgroupBarrier();
    }
}

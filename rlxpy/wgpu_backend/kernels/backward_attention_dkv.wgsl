// dK [WRT 1], dV [WRT 2] or both [WRT 3, dV at p.out2] of Attention, f32, recomputing the probabilities
// from the row statistics (backward_attention_stats): for each query head of the kv head's GQA group and
// each query tile, P^T = exp(s - m) / l, then dV += P^T dO and/or dS^T = P^T (dP^T - D) * factor with
// dP^T = V dO^T and dK += scale dS^T Q. Never materialises S_q x S_k. Workgroup = (16 keys, kv head, batch), thread
// (ty, tx) = (key row, query of the tile), then (key row, head dims tx + 16u). Query tiles [start,
// start + count) per dispatch; a later dispatch adds to what the earlier ones wrote.
// Bindings: 0 = arena window, 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

const D: u32 = {{D}}u;
const MASK_KIND: u32 = {{MASK_KIND}}u;
const UD: u32 = {{UD}}u;  // ceil(D / 16) head dims per thread
const WRT: u32 = {{WRT}}u;  // AttentionWrt: 1 = key, 2 = value, 3 = both
const WANT_K: bool = WRT != 2u;
const WANT_V: bool = WRT != 1u;

var<workgroup> ta: array<f32, 272>;
var<workgroup> tb: array<f32, 272>;
var<workgroup> pt: array<f32, 272>;
var<workgroup> st: array<f32, 272>;

#include "backward_attention_tiles.wgsl"

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = vec2<u32>(lane % T, lane / T);
    let hk = wid.y;
    let b = wid.z;
    let j0 = wid.x * T;
    let j = j0 + t.y;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    let shift = i32(p.s_k) - i32(p.s_q);
    var acc_k: array<f32, UD>;
    var acc_v: array<f32, UD>;
    for (var u = 0u; u < UD; u++) {
        acc_k[u] = 0.0;
        acc_v[u] = 0.0;
    }
    let tiles = (p.s_q + T - 1u) / T;
    let last_tile = min(tiles, p.start + p.count);
    for (var g = 0u; g < p.group; g++) {
        let h = hk * p.group + g;
        let q_base = p.q + b * p.q_sb + h * p.q_sh;
        let o_base = p.dy + b * p.q_sb + h * p.q_sh;
        for (var tile = p.start; tile < last_tile; tile++) {
            let i0 = tile * T;
            if (queries_skip_keys(i0, j0, shift)) {
                continue;
            }
            let i = i0 + t.x;
            let dot = dot_tile(t, k_base, p.k_ss, j0, p.s_k, q_base, p.q_ss, i0, p.s_q);
            var dp = 0.0;
            if (WANT_K) {
                dp = dot_tile(t, v_base, p.k_ss, j0, p.s_k, o_base, p.q_ss, i0, p.s_q);
            }
            var pr = 0.0;
            var ds = 0.0;
            if (i < p.s_q && j < p.s_k) {
                let stat = 3u * ((b * p.heads + h) * p.s_q + i);
                let m = ld_f32(p.stats + stat);
                let l = ld_f32(p.stats + stat + 1u);
                let sf = score_factor(dot, b, h, i, j, shift + i32(i));
                pr = prob(sf.x, m, l);
                ds = pr * (dp - ld_f32(p.stats + stat + 2u) / l) * sf.y;
            }
            workgroupBarrier();
            pt[t.y * TS + t.x] = pr;
            st[t.y * TS + t.x] = ds;
            // acc[j, d] += sum_i pt[j, i] dO[i, d] (dV) and st[j, i] Q[i, d] (dK), 16 queries x 16 dims staged
            for (var u = 0u; u < UD; u++) {
                workgroupBarrier();
                let d = u * T + t.x;
                var ov = 0.0;
                var qv = 0.0;
                if (i0 + t.y < p.s_q && d < D) {
                    if (WANT_V) {
                        ov = ld_f32(o_base + (i0 + t.y) * p.q_ss + d);
                    }
                    if (WANT_K) {
                        qv = ld_f32(q_base + (i0 + t.y) * p.q_ss + d);
                    }
                }
                ta[t.y * TS + t.x] = ov;
                tb[t.y * TS + t.x] = qv;
                workgroupBarrier();
                var sum_v = 0.0;
                var sum_k = 0.0;
                for (var ii = 0u; ii < T; ii++) {
                    sum_v += pt[t.y * TS + ii] * ta[ii * TS + t.x];
                    sum_k += st[t.y * TS + ii] * tb[ii * TS + t.x];
                }
                acc_v[u] += sum_v;
                acc_k[u] += sum_k;
            }
        }
    }
    if (j < p.s_k) {
        let row = b * p.k_sb + hk * p.k_sh + j * p.k_ss;
        for (var u = 0u; u < UD; u++) {
            let d = u * T + t.x;
            if (d < D) {
                if (WANT_K) {
                    let before = select(0.0, ld_f32(p.out + row + d), p.start > 0u);
                    st_f32(p.out + row + d, before + p.scale * acc_k[u]);
                }
                if (WANT_V) {
                    let out = select(p.out, p.out2, WRT == 3u);
                    let before = select(0.0, ld_f32(out + row + d), p.start > 0u);
                    st_f32(out + row + d, before + acc_v[u]);
                }
            }
        }
    }
}

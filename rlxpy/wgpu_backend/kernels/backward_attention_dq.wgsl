// dQ of Attention, f32, recomputing the probabilities from the row statistics (backward_attention_stats):
// for each key tile, P = exp(s - m) / l, dP = dO V^T, dS = P (dP - D) * factor, dQ += scale dS K. Never
// materialises S_q x S_k. Workgroup = (16 queries, head, batch), thread (ty, tx) = (query row, key of the
// tile) for P and dS, then (query row, head dims tx + 16u) for dQ. Key tiles [start, start + count) per
// dispatch; a later dispatch adds to what the earlier ones wrote. Bindings: 0 = arena window,
// 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

const D: u32 = {{D}}u;
const MASK_KIND: u32 = {{MASK_KIND}}u;
const UD: u32 = {{UD}}u;  // ceil(D / 16) head dims per thread

var<workgroup> ta: array<f32, 272>;
var<workgroup> tb: array<f32, 272>;
var<workgroup> ds: array<f32, 272>;

#include "backward_attention_tiles.wgsl"

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = vec2<u32>(lane % T, lane / T);
    let h = wid.y;
    let b = wid.z;
    let hk = h / p.group;
    let q0 = wid.x * T;
    let i = q0 + t.y;
    let q_base = p.q + b * p.q_sb + h * p.q_sh;
    let o_base = p.dy + b * p.q_sb + h * p.q_sh;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    let shift = i32(p.s_k) - i32(p.s_q);
    let pos = shift + i32(i);
    let stat = 3u * ((b * p.heads + h) * p.s_q + min(i, p.s_q - 1u));
    let m = ld_f32(p.stats + stat);
    let l = ld_f32(p.stats + stat + 1u);
    let big_d = ld_f32(p.stats + stat + 2u) / l;
    var acc: array<f32, UD>;
    for (var u = 0u; u < UD; u++) {
        acc[u] = 0.0;
    }
    let keys = key_range(q0, shift);
    let k_first = max(keys.x, p.start * T);
    let k_last = min(keys.y, (p.start + p.count) * T);
    for (var k0 = k_first; k0 < k_last; k0 += T) {
        let j = k0 + t.x;
        let dot = dot_tile(t, q_base, p.q_ss, q0, p.s_q, k_base, p.k_ss, k0, k_last);
        let dp = dot_tile(t, o_base, p.q_ss, q0, p.s_q, v_base, p.k_ss, k0, k_last);
        var g = 0.0;
        if (j < k_last && i < p.s_q) {
            let sf = score_factor(dot, b, h, i, j, pos);
            g = prob(sf.x, m, l) * (dp - big_d) * sf.y;
        }
        workgroupBarrier();
        ds[t.y * TS + t.x] = g;
        // dQ[i, d] += sum_j dS[i, j] K[j, d], K staged 16 keys x 16 dims at a time
        for (var u = 0u; u < UD; u++) {
            workgroupBarrier();
            let d = u * T + t.x;
            var kv = 0.0;
            if (k0 + t.y < k_last && d < D) {
                kv = ld_f32(k_base + (k0 + t.y) * p.k_ss + d);
            }
            ta[t.y * TS + t.x] = kv;
            workgroupBarrier();
            var sum = 0.0;
            for (var jj = 0u; jj < T; jj++) {
                sum += ds[t.y * TS + jj] * ta[jj * TS + t.x];
            }
            acc[u] += sum;
        }
    }
    if (i < p.s_q) {
        let out = p.out + b * p.q_sb + h * p.q_sh + i * p.q_ss;
        for (var u = 0u; u < UD; u++) {
            let d = u * T + t.x;
            if (d < D) {
                let before = select(0.0, ld_f32(out + d), p.start > 0u);
                st_f32(out + d, before + p.scale * acc[u]);
            }
        }
    }
}

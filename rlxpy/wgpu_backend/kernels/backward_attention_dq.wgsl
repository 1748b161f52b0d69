// dQ of Attention, f32, recomputing the probabilities from the row statistics (backward_attention_stats):
// for each tile of 32 keys, P = exp(s - m) / l, dP = dO V^T, dS = P (dP - D) * factor, dQ += scale dS K.
// Never materialises S_q x S_k. Workgroup = (64 queries, head, batch), thread (ty, tx) = query rows
// ty + 16a, keys tx + 16c for P and dS, then rows ty + 16a and head dims tx + 16u for dQ (K staged KC
// keys at a time). Key tiles [start, start + count) per dispatch; a later dispatch adds to what the
// earlier ones wrote. Bindings: 0 = arena window, 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

#include "backward_attention_tiles.wgsl"

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let qb = query_block(lane, wid);
    let t = qb.t;
    var m = vec4<f32>(0.0);
    var l = vec4<f32>(1.0);
    var big_d = vec4<f32>(0.0);
    for (var a = 0u; a < 4u; a++) {
        let stat = 3u * (qb.first_row + min(qb.q0 + t.y + 16u * a, p.s_q - 1u));
        m[a] = ld_f32(p.stats + stat);
        l[a] = ld_f32(p.stats + stat + 1u);
        big_d[a] = ld_f32(p.stats + stat + 2u) / l[a];
    }
    var acc: array<vec4<f32>, UD>;
    for (var u = 0u; u < UD; u++) {
        acc[u] = vec4<f32>(0.0);
    }
    let keys = block_keys(qb);
    let k_last = keys.y;
    for (var k0 = keys.x; k0 < k_last; k0 += BC) {
        let dots = dot_block(t, qb.q_base, p.q_ss, qb.q0, p.s_q, qb.k_base, p.k_ss, k0, k_last);
        let dps = dot_block(t, qb.o_base, p.q_ss, qb.q0, p.s_q, qb.v_base, p.k_ss, k0, k_last);
        for (var c = 0u; c < 2u; c++) {
            let j = k0 + t.x + 16u * c;
            for (var a = 0u; a < 4u; a++) {
                let i = qb.q0 + t.y + 16u * a;
                var g = 0.0;
                if (j < k_last && i < p.s_q) {
                    let sf = score_factor(dots[c][a], qb.b, qb.h, i, j, qb.shift + i32(i));
                    g = exp(sf.x - m[a]) / l[a] * (dps[c][a] - big_d[a]) * sf.y;
                }
                ps[(t.y + 16u * a) * PS + t.x + 16u * c] = g;
            }
        }
        for (var c0 = 0u; c0 < BC; c0 += KC) {
            workgroupBarrier();  // also publishes dS on the first pass
            stage_rows(lane, qb.k_base, p.k_ss, k0 + c0, k_last);
            workgroupBarrier();
            accumulate(t, c0, &acc);
        }
    }
    for (var a = 0u; a < 4u; a++) {
        let i = qb.q0 + t.y + 16u * a;
        if (i < p.s_q) {
            let out = p.out + qb.b * p.q_sb + qb.h * p.q_sh + i * p.q_ss;
            for (var u = 0u; u < UD; u++) {
                let d = t.x + 16u * u;
                if (d < D) {
                    let before = select(0.0, ld_f32(out + d), p.start > 0u);
                    st_f32(out + d, before + p.scale * acc[u][a]);
                }
            }
        }
    }
}

// Row statistics of the attention backward, f32: per query row i of (batch, head), over the keys,
// m = max score, l = sum exp(s - m) and acc = sum exp(s - m) (dO_i . V_j): the softmax's normaliser and,
// once divided by l, D_i = sum_j P_ij dP_ij = dO_i . O_i. Stored unnormalised at stats + 3 * row (row =
// (b * H + h) * S_q + i) so that a long key range can run over several dispatches (key tiles [start,
// start + count) of 32 keys; a later dispatch resumes from the stored values). Workgroup = (64 queries,
// head, batch), thread (ty, tx) = query rows ty + 16a, keys tx + 16c of each tile.
// Bindings: 0 = arena window, 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

#include "backward_attention_tiles.wgsl"

fn rows4(base: u32, stride: u32) -> vec4<f32> {
    return vec4<f32>(ps[base], ps[base + stride], ps[base + 2u * stride], ps[base + 3u * stride]);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let qb = query_block(lane, wid);
    let t = qb.t;
    var m = vec4<f32>(neg_inf());
    var l = vec4<f32>(0.0);
    var acc = vec4<f32>(0.0);
    if (p.start > 0u) {
        for (var a = 0u; a < 4u; a++) {
            let i = qb.q0 + t.y + 16u * a;
            if (i < p.s_q) {
                m[a] = ld_f32(p.stats + 3u * (qb.first_row + i));
                l[a] = ld_f32(p.stats + 3u * (qb.first_row + i) + 1u);
                acc[a] = ld_f32(p.stats + 3u * (qb.first_row + i) + 2u);
            }
        }
    }
    let span = block_keys(qb);
    for (var k0 = span.x; k0 < span.y; k0 += BC) {
        let k_last = span.y;
        let dots = dot_block(t, qb.q_base, p.q_ss, qb.q0, p.s_q, qb.k_base, p.k_ss, k0, k_last);
        let dps = dot_block(t, qb.o_base, p.q_ss, qb.q0, p.s_q, qb.v_base, p.k_ss, k0, k_last);
        var s = mat2x4<f32>(vec4<f32>(neg_inf()), vec4<f32>(neg_inf()));
        for (var c = 0u; c < 2u; c++) {
            let j = k0 + t.x + 16u * c;
            if (j < k_last) {
                for (var a = 0u; a < 4u; a++) {
                    let i = qb.q0 + t.y + 16u * a;
                    s[c][a] = score_factor(dots[c][a], qb.b, qb.h, min(i, p.s_q - 1u), j, qb.shift + i32(i)).x;
                }
            }
        }
        // row maxima: each thread's pair, then the 16 threads of a row through ps
        let pair_max = max(s[0], s[1]);
        for (var a = 0u; a < 4u; a++) {
            ps[(t.y + 16u * a) * 16u + t.x] = pair_max[a];
        }
        workgroupBarrier();
        var tile_max = vec4<f32>(neg_inf());
        for (var x = 0u; x < 16u; x++) {
            tile_max = max(tile_max, rows4(t.y * 16u + x, 256u));
        }
        let m_new = max(m, tile_max);
        // a row with no key yet keeps m = -inf: nothing to rescale, nothing added
        let alpha = select(exp(m - m_new), vec4<f32>(0.0), m == vec4<f32>(neg_inf()));
        let e0 = select(exp(s[0] - m_new), vec4<f32>(0.0), s[0] == vec4<f32>(neg_inf()));
        let e1 = select(exp(s[1] - m_new), vec4<f32>(0.0), s[1] == vec4<f32>(neg_inf()));
        workgroupBarrier();
        let pl = e0 + e1;
        let pd = e0 * dps[0] + e1 * dps[1];
        for (var a = 0u; a < 4u; a++) {
            ps[(t.y + 16u * a) * 32u + 2u * t.x] = pl[a];
            ps[(t.y + 16u * a) * 32u + 2u * t.x + 1u] = pd[a];
        }
        workgroupBarrier();
        var sum_l = vec4<f32>(0.0);
        var sum_d = vec4<f32>(0.0);
        for (var x = 0u; x < 16u; x++) {
            sum_l += rows4(t.y * 32u + 2u * x, 512u);
            sum_d += rows4(t.y * 32u + 2u * x + 1u, 512u);
        }
        l = l * alpha + sum_l;
        acc = acc * alpha + sum_d;
        m = m_new;
        workgroupBarrier();
    }
    if (t.x == 0u) {
        for (var a = 0u; a < 4u; a++) {
            let i = qb.q0 + t.y + 16u * a;
            if (i < p.s_q) {
                st_f32(p.stats + 3u * (qb.first_row + i), m[a]);
                st_f32(p.stats + 3u * (qb.first_row + i) + 1u, l[a]);
                st_f32(p.stats + 3u * (qb.first_row + i) + 2u, acc[a]);
            }
        }
    }
}

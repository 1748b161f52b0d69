// dQ of Attention, f32, recomputing the probabilities from the row statistics (backward_attention_stats):
// for each tile of 32 keys, P = exp(s - m) / l, dP = dO V^T, dS = P (dP - D) * factor, dQ += scale dS K.
// Never materialises S_q x S_k. Workgroup = (64 queries, head, batch); thread (tx, ty) = query rows
// 4 ty + a, keys 2 tx + c of each tile (score_block), then rows 4 ty + a and head dims 64 g + 4 tx + e of
// dQ (row_product over the tile's K rows). Key tiles [start, start + count) per dispatch; a later
// dispatch adds to what the earlier ones wrote. dQ is stored with the strides oq_* (q's layout, or the packed
// rows). Bindings: 0 = arena window, 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

#include "backward_attention_tiles.wgsl"

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let qb = query_block(lane, wid);
    let t = qb.t;
    let rows = qb.q0 + 4u * t.y + vec4<u32>(0u, 1u, 2u, 3u);
    let stat = 3u * (qb.first_row + min(rows, vec4<u32>(p.s_q - 1u)));
    let m = vec4<f32>(ld_f32(p.stats + stat.x), ld_f32(p.stats + stat.y), ld_f32(p.stats + stat.z),
                      ld_f32(p.stats + stat.w));
    let l = vec4<f32>(ld_f32(p.stats + stat.x + 1u), ld_f32(p.stats + stat.y + 1u), ld_f32(p.stats + stat.z + 1u),
                      ld_f32(p.stats + stat.w + 1u));
    let big_d = vec4<f32>(ld_f32(p.stats + stat.x + 2u), ld_f32(p.stats + stat.y + 2u),
                          ld_f32(p.stats + stat.z + 2u), ld_f32(p.stats + stat.w + 2u)) / l;
    let in_rows = rows < vec4<u32>(p.s_q);
    let i = min(rows, vec4<u32>(p.s_q - 1u));
    var acc: array<vec4<f32>, 4 * DG>;
    let keys = block_keys(qb);
    let k_last = keys.y;
    for (var k0 = keys.x; k0 < k_last; k0 += BC) {
        let dots = score_block(t, lane, qb.q_base, p.q_ss, qb.q0, p.s_q, qb.k_base, p.k_ss, k0, k_last);
        let dps = score_block(t, lane, qb.o_base, p.q_ss, qb.q0, p.s_q, qb.v_base, p.k_ss, k0, k_last);
        let j = k0 + 2u * t.x;
        let f0 = score_factor4(dots[0], qb.b, qb.h, i, vec4<u32>(min(j, p.s_k - 1u)), qb.shift);
        let f1 = score_factor4(dots[1], qb.b, qb.h, i, vec4<u32>(min(j + 1u, p.s_k - 1u)), qb.shift);
        let ds0 = exp(f0[0] - m) / l * (dps[0] - big_d) * f0[1];
        let ds1 = exp(f1[0] - m) / l * (dps[1] - big_d) * f1[1];
        let zero = vec4<f32>(0.0);
        store_weights(t, mat2x4<f32>(select(zero, ds0, in_rows & vec4<bool>(j < k_last)),
                                     select(zero, ds1, in_rows & vec4<bool>(j + 1u < k_last))));
        row_product(t, lane, qb.k_base, p.k_ss, k0, k_last, &acc);
    }
    store_grads(&acc, p.out + qb.b * p.oq_sb + qb.h * p.oq_sh, p.oq_ss, qb.q0 + 4u * t.y, p.s_q, 4u * t.x,
                p.scale);
}

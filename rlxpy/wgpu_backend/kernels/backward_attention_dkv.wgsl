// dK [WRT 1], dV [WRT 2] or both [WRT 3, dV at p.out2] of Attention, f32, recomputing the probabilities
// from the row statistics (backward_attention_stats): for each query head of the kv head's GQA group and
// each tile of 32 queries, P^T = exp(s - m) / l, then dV += P^T dO and/or dS^T = P^T (dP^T - D) * factor
// with dP^T = V dO^T and dK += scale dS^T Q. Never materialises S_q x S_k. Workgroup = (64 keys, kv
// head, batch); thread (tx, ty) = key rows 4 ty + a, queries 2 tx + c of each tile (score_block), then
// key rows 4 ty + a and head dims 64 g + 4 tx + e (row_product over the tile's dO / Q rows). Query tiles
// [start, start + count) per dispatch; a later dispatch adds to what the earlier ones wrote.
// Bindings: 0 = arena window, 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

const WRT: u32 = {{WRT}}u;  // AttentionWrt: 1 = key, 2 = value, 3 = both
const WANT_K: bool = WRT != 2u;
const WANT_V: bool = WRT != 1u;

#include "backward_attention_tiles.wgsl"

// (m, l, D) of statistics row `row`: D = the stored sum over l
fn row_stats(row: u32) -> vec3<f32> {
    let l = ld_f32(p.stats + 3u * row + 1u);
    return vec3<f32>(ld_f32(p.stats + 3u * row), l, ld_f32(p.stats + 3u * row + 2u) / l);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = vec2<u32>(lane % 16u, lane / 16u);
    let hk = wid.y;
    let b = wid.z;
    let j0 = wid.x * BR;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    let shift = i32(p.s_k) - i32(p.s_q);
    let keys = j0 + 4u * t.y + vec4<u32>(0u, 1u, 2u, 3u);
    let in_keys = keys < vec4<u32>(p.s_k);
    let j = min(keys, vec4<u32>(p.s_k - 1u));
    var acc_k: array<vec4<f32>, 4 * DG>;
    var acc_v: array<vec4<f32>, 4 * DG>;
    let last_tile = min((p.s_q + BC - 1u) / BC, p.start + p.count);
    for (var g = 0u; g < p.group; g++) {
        let h = hk * p.group + g;
        let q_base = p.q + b * p.q_sb + h * p.q_sh;
        let o_base = p.dy + b * p.q_sb + h * p.q_sh;
        let first_row = (b * p.heads + h) * p.s_q;
        for (var tile = p.start; tile < last_tile; tile++) {
            let i0 = tile * BC;
            if (queries_skip_keys(i0, j0, shift)) {
                continue;
            }
            let dots = score_block(t, lane, k_base, p.k_ss, j0, p.s_k, q_base, p.q_ss, i0, p.s_q);
            var dps = mat2x4<f32>(vec4<f32>(0.0), vec4<f32>(0.0));
            if (WANT_K) {
                dps = score_block(t, lane, v_base, p.k_ss, j0, p.s_k, o_base, p.q_ss, i0, p.s_q);
            }
            let i = i0 + 2u * t.x;
            let i_0 = min(i, p.s_q - 1u);
            let i_1 = min(i + 1u, p.s_q - 1u);
            let st0 = row_stats(first_row + i_0);
            let st1 = row_stats(first_row + i_1);
            let f0 = score_factor4(dots[0], b, h, vec4<u32>(i_0), j, shift);
            let f1 = score_factor4(dots[1], b, h, vec4<u32>(i_1), j, shift);
            let zero = vec4<f32>(0.0);
            let pr = mat2x4<f32>(select(zero, exp(f0[0] - st0.x) / st0.y, in_keys & vec4<bool>(i < p.s_q)),
                                 select(zero, exp(f1[0] - st1.x) / st1.y, in_keys & vec4<bool>(i + 1u < p.s_q)));
            if (WANT_V) {  // dV[j] += sum_i P^T[j, i] dO[i]
                store_weights(t, pr);
                row_product(t, lane, o_base, p.q_ss, i0, p.s_q, &acc_v);
            }
            if (WANT_K) {  // dK[j] += sum_i dS^T[j, i] Q[i] (scaled at the end)
                store_weights(t, mat2x4<f32>(pr[0] * (dps[0] - st0.z) * f0[1], pr[1] * (dps[1] - st1.z) * f1[1]));
                row_product(t, lane, q_base, p.q_ss, i0, p.s_q, &acc_k);
            }
        }
    }
    let out = b * p.ok_sb + hk * p.ok_sh;  // k's layout, or the packed rows
    if (WANT_K) {
        store_grads(&acc_k, p.out + out, p.ok_ss, j0 + 4u * t.y, p.s_k, 4u * t.x, p.scale);
    }
    if (WANT_V) {
        store_grads(&acc_v, select(p.out, p.out2, WRT == 3u) + out, p.ok_ss, j0 + 4u * t.y, p.s_k, 4u * t.x, 1.0);
    }
}

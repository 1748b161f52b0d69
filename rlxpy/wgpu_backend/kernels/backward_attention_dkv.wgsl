// dK [WRT 1], dV [WRT 2] or both [WRT 3, dV at p.out2] of Attention, f32, recomputing the probabilities
// from the row statistics (backward_attention_stats): for each query head of the kv head's GQA group and
// each tile of 32 queries, P^T = exp(s - m) / l, then dV += P^T dO and/or dS^T = P^T (dP^T - D) * factor
// with dP^T = V dO^T and dK += scale dS^T Q. Never materialises S_q x S_k. Workgroup = (64 keys, kv
// head, batch), thread (ty, tx) = key rows ty + 16a, queries tx + 16c, then key rows and head dims
// tx + 16u (dO / Q staged KC queries at a time). Query tiles [start, start + count) per dispatch; a later
// dispatch adds to what the earlier ones wrote. Bindings: 0 = arena window, 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

const WRT: u32 = {{WRT}}u;  // AttentionWrt: 1 = key, 2 = value, 3 = both
const WANT_K: bool = WRT != 2u;
const WANT_V: bool = WRT != 1u;

#include "backward_attention_tiles.wgsl"

fn store_block(t: vec2<u32>, x: mat2x4<f32>) {
    for (var c = 0u; c < 2u; c++) {
        for (var a = 0u; a < 4u; a++) {
            ps[(t.y + 16u * a) * PS + t.x + 16u * c] = x[c][a];
        }
    }
}

// acc += x^T R: x (this block's 32 keys x BC queries, in registers) goes to workgroup memory, the BC rows
// of R (from query row i0 of the matrix at base) are staged KC at a time.
fn add_block_product(t: vec2<u32>, lane: u32, x: mat2x4<f32>, base: u32, i0: u32,
                     acc: ptr<function, array<vec4<f32>, UD>>) {
    store_block(t, x);
    for (var c0 = 0u; c0 < BC; c0 += KC) {
        workgroupBarrier();
        stage_rows(lane, base, p.q_ss, i0 + c0, p.s_q);
        workgroupBarrier();
        accumulate(t, c0, acc);
    }
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
    var acc_k: array<vec4<f32>, UD>;
    var acc_v: array<vec4<f32>, UD>;
    for (var u = 0u; u < UD; u++) {
        acc_k[u] = vec4<f32>(0.0);
        acc_v[u] = vec4<f32>(0.0);
    }
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
            let dots = dot_block(t, k_base, p.k_ss, j0, p.s_k, q_base, p.q_ss, i0, p.s_q);
            var dps = mat2x4<f32>(vec4<f32>(0.0), vec4<f32>(0.0));
            if (WANT_K) {
                dps = dot_block(t, v_base, p.k_ss, j0, p.s_k, o_base, p.q_ss, i0, p.s_q);
            }
            var pr = mat2x4<f32>(vec4<f32>(0.0), vec4<f32>(0.0));
            var ds = mat2x4<f32>(vec4<f32>(0.0), vec4<f32>(0.0));
            for (var c = 0u; c < 2u; c++) {
                let i = i0 + t.x + 16u * c;
                if (i < p.s_q) {
                    let stat = 3u * (first_row + i);
                    let m = ld_f32(p.stats + stat);
                    let l = ld_f32(p.stats + stat + 1u);
                    let big_d = ld_f32(p.stats + stat + 2u) / l;
                    for (var a = 0u; a < 4u; a++) {
                        let j = j0 + t.y + 16u * a;
                        if (j < p.s_k) {
                            let sf = score_factor(dots[c][a], b, h, i, j, shift + i32(i));
                            pr[c][a] = exp(sf.x - m) / l;
                            ds[c][a] = pr[c][a] * (dps[c][a] - big_d) * sf.y;
                        }
                    }
                }
            }
            if (WANT_V) {  // dV[j] += sum_i P^T[j, i] dO[i]
                add_block_product(t, lane, pr, o_base, i0, &acc_v);
                workgroupBarrier();  // every thread has read P^T before dS^T replaces it
            }
            if (WANT_K) {  // dK[j] += sum_i dS^T[j, i] Q[i] (scaled at the end)
                add_block_product(t, lane, ds, q_base, i0, &acc_k);
            }
        }
    }
    for (var a = 0u; a < 4u; a++) {
        let j = j0 + t.y + 16u * a;
        if (j < p.s_k) {
            let row = b * p.k_sb + hk * p.k_sh + j * p.k_ss;
            for (var u = 0u; u < UD; u++) {
                let d = t.x + 16u * u;
                if (d < D) {
                    if (WANT_K) {
                        let before = select(0.0, ld_f32(p.out + row + d), p.start > 0u);
                        st_f32(p.out + row + d, before + p.scale * acc_k[u][a]);
                    }
                    if (WANT_V) {
                        let out = select(p.out, p.out2, WRT == 3u);
                        let before = select(0.0, ld_f32(out + row + d), p.start > 0u);
                        st_f32(out + row + d, before + acc_v[u][a]);
                    }
                }
            }
        }
    }
}

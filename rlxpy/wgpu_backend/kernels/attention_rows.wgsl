// Attention for few queries on CPU adapters: attention_decode's semantics and params, one invocation per
// (query row, head, batch) walking its keys with an online softmax; no workgroup memory, no barriers
// (lavapipe/llvmpipe run workgroups as SIMD batches, where barriers and shared memory are costly).
// Bindings: 0 = arena window (u32 words), 1 = AttentionDecodeParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const D: u32 = {{D}}u;  // head_dim
const MASK_KIND: u32 = {{MASK_KIND}}u;

#include "attention_mask.wgsl"
#include "attention_kv_extent.wgsl"

var<private> q: array<f32, D>;
var<private> acc: array<f32, D>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let rows = p.heads * p.s_q;
    let live = gid.x < rows;
    let row = min(gid.x, rows - 1u);  // the tail recomputes the last row and stores nothing
    let h = row / p.s_q;
    let i = row % p.s_q;
    let b = gid.z;
    let hk = h / p.group;
    let q_base = p.q + b * p.q_sb + h * p.q_sh + i * p.q_ss;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    for (var d = 0u; d < D; d++) {
        q[d] = ld_f32(q_base + d);
        acc[d] = 0.0;
    }
    let kv_total = kv_extent(b);  // keys past it (an unfilled KV cache) are never read
    let pos = i32(kv_total) - i32(p.s_q) + i32(i);
    var k_begin = 0u;
    var k_end = kv_total;
    // keys the causal / window mask hides add exactly 0, unless every key is hidden (pos < 0):
    // then the row averages all keys, as the reference's softmax of equal scores does
    if ((MASK_KIND == 1u || MASK_KIND == 3u) && pos >= 0) {
        k_end = min(k_end, u32(pos) + 1u);
        if (MASK_KIND == 3u) {
            k_begin = u32(max(0, pos - i32(p.window)));
        }
    }
    var m = neg_inf();
    var l = 0.0;
    for (var j = k_begin; j < k_end; j++) {
        let k_row = k_base + j * p.k_ss;
        var dot = 0.0;
        for (var d = 0u; d < D; d++) {
            dot += q[d] * ld_f32(k_row + d);
        }
        let s = masked_score(dot, b, h, i, j, pos);
        let m_new = max(m, s);
        // a -inf score (an additive -inf) weighs 0, also while the max is still -inf (no -inf - -inf)
        let alpha = select(exp(m - m_new), 1.0, m == m_new);
        let weight = select(exp(s - m_new), 0.0, s == neg_inf());
        m = m_new;
        l = l * alpha + weight;
        let v_row = v_base + j * p.k_ss;
        for (var d = 0u; d < D; d++) {
            acc[d] = acc[d] * alpha + weight * ld_f32(v_row + d);
        }
    }
    if (live) {
        let o_base = p.o + b * p.o_sb + h * p.o_sh + i * p.o_ss;
        for (var d = 0u; d < D; d++) {
            st_f32(o_base + d, select(acc[d] / l, 0.0, l == 0.0));
        }
    }
}

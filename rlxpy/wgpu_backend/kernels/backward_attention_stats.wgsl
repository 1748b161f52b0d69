// Row statistics of the attention backward, f32: per query row i of (batch, head), over the keys,
// m = max score, l = sum exp(s - m) and acc = sum exp(s - m) (dO_i . V_j): the softmax's normaliser and,
// once divided by l, D_i = sum_j P_ij dP_ij = dO_i . O_i. Stored unnormalised at stats + 3 * row (row =
// (b * H + h) * S_q + i) so that a long key range can run over several dispatches (key tiles [start,
// start + count); a later dispatch resumes from the stored values). Workgroup = (16 queries, head,
// batch), thread (ty, tx) = (query row, key of the tile). Bindings: 0 = arena window, 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

const D: u32 = {{D}}u;
const MASK_KIND: u32 = {{MASK_KIND}}u;

var<workgroup> ta: array<f32, 272>;
var<workgroup> tb: array<f32, 272>;
var<workgroup> rows: array<vec2<f32>, 272>;

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
    let row = (b * p.heads + h) * p.s_q + i;
    var m = neg_inf();
    var l = 0.0;
    var acc = 0.0;
    if (p.start > 0u && i < p.s_q) {
        m = ld_f32(p.stats + 3u * row);
        l = ld_f32(p.stats + 3u * row + 1u);
        acc = ld_f32(p.stats + 3u * row + 2u);
    }
    let keys = key_range(q0, shift);
    let k_first = max(keys.x, p.start * T);
    let k_last = min(keys.y, (p.start + p.count) * T);
    for (var k0 = k_first; k0 < k_last; k0 += T) {
        let j = k0 + t.x;
        let dot = dot_tile(t, q_base, p.q_ss, q0, p.s_q, k_base, p.k_ss, k0, k_last);
        let dp = dot_tile(t, o_base, p.q_ss, q0, p.s_q, v_base, p.k_ss, k0, k_last);
        var s = neg_inf();
        if (j < k_last) {
            s = score_factor(dot, b, h, min(i, p.s_q - 1u), j, pos).x;
        }
        rows[t.y * TS + t.x] = vec2<f32>(s, 0.0);
        workgroupBarrier();
        var tile_max = neg_inf();
        for (var x = 0u; x < T; x++) {
            tile_max = max(tile_max, rows[t.y * TS + x].x);
        }
        let m_new = max(m, tile_max);
        // a row with no key yet keeps m = -inf: nothing to rescale, nothing added
        let alpha = select(exp(m - m_new), 0.0, m == neg_inf());
        let e = select(exp(s - m_new), 0.0, s == neg_inf());
        workgroupBarrier();
        rows[t.y * TS + t.x] = vec2<f32>(e, e * dp);
        workgroupBarrier();
        var sums = vec2<f32>(0.0);
        for (var x = 0u; x < T; x++) {
            sums += rows[t.y * TS + x];
        }
        l = l * alpha + sums.x;
        acc = acc * alpha + sums.y;
        m = m_new;
        workgroupBarrier();
    }
    if (t.x == 0u && i < p.s_q) {
        st_f32(p.stats + 3u * row, m);
        st_f32(p.stats + 3u * row + 1u, l);
        st_f32(p.stats + 3u * row + 2u, acc);
    }
}

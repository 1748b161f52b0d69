// Flash attention for short heads (head_dim <= 64, a multiple of 4), f32: out = softmax(mask(softcap(
// scale * q k^T))) v with an online softmax, one query row per invocation. A workgroup = (BQ queries,
// head, batch) x SPLITS key splits: the invocations of split s (one warp per 32 queries) take keys
// s*KT .. s*KT+KT-1 of every block of BKEYS keys, so a warp reads the same key at once (workgroup
// memory broadcasts) and no score is reduced across invocations; each keeps its row's q, running max
// and sum and output in registers. The splits' partial rows are merged at the end. Blocks of K and V
// go through workgroup memory, the next block's loads issued into registers before this block's
// products (two barriers per block).
// Bindings: 0 = arena window (u32 words), 1 = AttentionFlashParams.
#include "common_arena.wgsl"

const D: u32 = {{D}}u;  // head_dim
const DV: u32 = D / 4u;  // vec4s per row
const BQ: u32 = 32u;  // queries per workgroup
const SPLITS: u32 = {{SPLITS}}u;  // key splits per workgroup
const KT: u32 = {{KT}}u;  // keys per split and block
const BKEYS: u32 = SPLITS * KT;  // keys per block (>= BQ: the merge hands rows over through ks)
const THREADS: u32 = BQ * SPLITS;
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

var<workgroup> ks: array<vec4<f32>, BKEYS * DV>;
var<workgroup> vs: array<vec4<f32>, BKEYS * DV>;

#include "attention_mask.wgsl"
#include "attention_kv_extent.wgsl"

// vec4 f of a block of K or V rows (key f / DV, dims 4 (f % DV) ..) from key k0 on; zero past
// k_end or past the block. Branch-free: the loads of a block are all in flight together.
fn load_kv(base: u32, f: u32, k0: u32, k_end: u32) -> vec4<f32> {
    let j = k0 + f / DV;
    let inside = j < k_end && f < BKEYS * DV;
    let a = base + select(0u, j * p.k_ss + 4u * (f % DV), inside);
    let v = vec4<f32>(ld_f32(a), ld_f32(a + 1u), ld_f32(a + 2u), ld_f32(a + 3u));
    return select(vec4<f32>(0.0), v, inside);
}

// weight of a partial row with running max m in a merge whose max is mm (0 for a row that saw no key)
fn merge_weight(m: f32, mm: f32) -> f32 {
    return select(0.0, exp(m - mm), m != neg_inf());
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let split = t / BQ;
    let qi = t % BQ;
    let h = wid.y;
    let b = wid.z;
    let hk = h / p.group;  // GQA: query head h reads kv head h // (H / H_kv)
    let q0 = wid.x * BQ;
    let i = min(q0 + qi, p.s_q - 1u);  // rows past S_q compute the last row and store nothing
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    let kv_total = kv_extent(b);  // keys past it (an unfilled KV cache) are never read
    let shift = i32(kv_total) - i32(p.s_q);
    let keys = visible_keys(shift + i32(q0), shift + i32(min(q0 + BQ, p.s_q)) - 1, kv_total);
    let k_end = keys.y;
    let pos = shift + i32(q0 + qi);
    let qa = p.q + b * p.q_sb + h * p.q_sh + i * p.q_ss;
    // generated: the q row qv<c>, the output row acc<c>, the staged block kx<n> / vx<n>
{{DECL}}
    var m = neg_inf();
    var l = 0.0;
    var k0 = keys.x;
{{FETCH}}
    for (; k0 < k_end; k0 += BKEYS) {
        workgroupBarrier();
{{PUT}}
        workgroupBarrier();
        let next = k0 + BKEYS;
{{FETCH_NEXT}}
        // this split's KT scores (keys past k_end: -inf), then one rescale for the block
        let kr = split * KT * DV;
        let j0 = k0 + split * KT;
{{SCORES}}
        let m_new = max(m, {{BLOCK_MAX}});
        let live = m_new != neg_inf();  // false while every key so far was past k_end
        let alpha = select(1.0, exp(m - m_new), live);
{{WEIGHTS}}
        l = l * alpha + {{WEIGHT_SUM}};
        m = select(m, m_new, live);
{{PV}}
    }
    // splits 1 .. SPLITS-1 hand their rows to split 0, one at a time (row qi: ks[qi * DV ..], m, l in vs[qi])
    for (var s = 1u; s < SPLITS; s++) {
        workgroupBarrier();
        if (split == s) {
{{HAND}}
            vs[qi] = vec4<f32>(m, l, 0.0, 0.0);
        }
        workgroupBarrier();
        if (split == 0u) {
            let other = vs[qi];
            let mm = max(m, other.x);
            let wa = merge_weight(m, mm);
            let wb = merge_weight(other.x, mm);
            l = l * wa + other.y * wb;
            m = mm;
{{TAKE}}
        }
    }
    if (split == 0u && q0 + qi < p.s_q) {
        let oa = p.o + b * p.o_sb + h * p.o_sh + i * p.o_ss;
        let inv = select(1.0 / l, 0.0, l == 0.0);
{{STORE}}
    }
}

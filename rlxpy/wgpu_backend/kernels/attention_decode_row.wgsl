// Attention for few queries (decode) in one pass over the keys, f32: one workgroup per query row (head h,
// query i, batch b). Its lanes form G = 256 / LK key groups of LK lanes; a group takes keys g, g + G, ...
// KEYS at a time (all their K and V loads issued together), each lane DL dims d = lane + LK e; the
// group's dot product is summed by subgroup shuffles where the device has them (else every lane computes
// it whole), and each group keeps its own online softmax, so the key loop has no barrier. The groups'
// (max, sum, output) merge at the end: within each subgroup by shuffles, then through workgroup memory.
// Bindings: 0 = arena window (u32 words), 1 = AttentionDecodeRowParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const D: u32 = {{D}}u;  // head_dim
const LK: u32 = {{LK}}u;  // lanes per key (a power of two)
const DL: u32 = {{DL}}u;  // dims per lane: ceil(D / LK)
const G: u32 = 256u / LK;  // key groups
const KEYS: u32 = {{KEYS}}u;  // keys per group and step
const EXACT: bool = {{EXACT}};  // LK * DL == D: every lane's dims exist
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

var<workgroup> part_m: array<f32, G>;  // each group's running max
var<workgroup> part_l: array<f32, G>;  // ... and softmax sum
var<workgroup> part_acc: array<f32, 256u * DL>;  // [G][LK * DL]: its output, dim d at slot d

#include "attention_mask.wgsl"
#include "attention_kv_extent.wgsl"

fn dim_at(row: u32, d: u32) -> f32 {
    if (EXACT) {
        return ld_f32(row + d);
    }
    return select(0.0, ld_f32(row + min(d, D - 1u)), d < D);
}

// the whole dot product of a query and a key row, in one lane (no cross-lane sum)
fn full_dot(q_row: u32, k_row: u32) -> f32 {
    var s = 0.0;
    for (var d = 0u; d < D; d = d + 1u) {
        s = s + ld_f32(q_row + d) * ld_f32(k_row + d);
    }
    return s;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>{{SG_ARGS}}) {
    let h = wid.x / p.s_q;
    let i = wid.x % p.s_q;
    let b = wid.y;
    let hk = h / p.group;
    let g = t / LK;
    let lane = t % LK;
    let q_row = p.q + b * p.q_sb + h * p.q_sh + i * p.q_ss;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    let kv_total = kv_extent(b);  // keys past it (an unfilled KV cache) are never read
    let pos = i32(kv_total) - i32(p.s_q) + i32(i);
    let seen = visible_keys(pos, pos, kv_total);
    let k_end = seen.y;
{{Q_LOAD}}
    var m = neg_inf();
    var l = 0.0;
    for (var k0 = seen.x; k0 < k_end; k0 = k0 + G * KEYS) {
{{KEY_STEP}}
    }
    // the groups of `span` lanes are merged: with subgroups a whole subgroup's groups first, by shuffles
    // (GROUP_MERGE), then the first group of each span writes its (max, sum, output) for the final merge
    var span = LK;
{{GROUP_MERGE}}
    let slot = t / span;
    if (t % span < LK) {
        if (lane == 0u) {
            part_m[slot] = m;
            part_l[slot] = l;
        }
{{ACC_STORE}}
    }
    workgroupBarrier();
    if (t < D) {
        // groups without keys (l == 0) are skipped; a NaN sum stays NaN (NaN != 0)
        let entries = 256u / span;
        var mx = neg_inf();
        for (var gg = 0u; gg < entries; gg = gg + 1u) {
            if (part_l[gg] != 0.0) {
                mx = max(mx, part_m[gg]);
            }
        }
        var total_l = 0.0;
        var total = 0.0;
        for (var gg = 0u; gg < entries; gg = gg + 1u) {
            let lg = part_l[gg];
            if (lg != 0.0) {
                let w = exp(part_m[gg] - mx);
                total_l = total_l + lg * w;
                total = total + part_acc[gg * LK * DL + t] * w;
            }
        }
        // no key at all: 0; keys whose scores are all -inf: NaN, as the reference's softmax gives
        var out = select(total / total_l, bitcast<f32>(0x7fc00000u), total_l == 0.0);
        out = select(out, 0.0, seen.x >= k_end);
        st_f32(p.o + b * p.o_sb + h * p.o_sh + i * p.o_ss + t, out);
    }
}

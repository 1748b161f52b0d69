// Split-K attention combine, f32: out = sum_s acc_s * e^(m_s - m) / sum_s l_s * e^(m_s - m), m = max_s m_s.
// One workgroup per query row (b, h, i), grid folded into y past 65535; thread t owns dims t, t + WG, ...
// Bindings: 0 = arena window (u32 words), 1 = AttentionCombineParams (part = partial records [acc[D], m, l]).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"

const D: u32 = {{D}}u;

fn run_row(row: u32, t: u32) {
    if (row >= p.rows) {
        return;
    }
    let first = p.part + row * p.splits * (D + 2u);
    // a split with no keys has l == 0 and m = -inf: skip it (a NaN row keeps its NaN: NaN != 0)
    var m = bitcast<f32>(0xff800000u);
    for (var s = 0u; s < p.splits; s++) {
        let rec = first + s * (D + 2u);
        if (ld_f32(rec + D + 1u) != 0.0) {
            m = max(m, ld_f32(rec + D));
        }
    }
    let i = row % p.s_q;
    let h = (row / p.s_q) % p.heads;
    let b = row / (p.s_q * p.heads);
    let o_base = p.o + b * p.o_sb + h * p.o_sh + i * p.o_ss;
    for (var d = t; d < D; d += {{WG}}u) {
        var l = 0.0;
        var acc = 0.0;
        for (var s = 0u; s < p.splits; s++) {
            let rec = first + s * (D + 2u);
            let ls = ld_f32(rec + D + 1u);
            if (ls != 0.0) {
                let w = exp(ld_f32(rec + D) - m);
                l += ls * w;
                acc += ld_f32(rec + d) * w;
            }
        }
        st_f32(o_base + d, select(acc / l, 0.0, l == 0.0));
    }
}

// The online softmax statistics of norm_softmax_lines and norm_softmax_rows: (m, s) = the running max
// and the sum of exp(x - m), the sum rescaled whenever the max grows.
#include "common_float.wgsl"

// exp(a - m), with -inf inputs contributing exactly 0 (so a leading -inf does not turn the sum into NaN,
// and an all -inf run is (m = -inf, s = 0), not NaN).
fn exp_shift(a: f32, m: f32) -> f32 {
    return select(exp(a - m), 0.0, a == -inf_f32());
}

// (m, s) after one more value v
fn online_add(ms: vec2<f32>, v: f32) -> vec2<f32> {
    let m_new = maxp(ms.x, v);
    return vec2<f32>(m_new, ms.y * exp_shift(ms.x, m_new) + exp_shift(v, m_new));
}

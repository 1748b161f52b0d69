// dx of an activation, f32: dx[i] = dy[i] * fn'(t[i]), t the activation's input v or (OF_OUTPUT kinds) its
// output y; y is recomputed from v ({{FORWARD}}) when a kind's slope is written in y but the input was
// given. One invocation per element. Bindings: 0 = arena window (u32 words), 1 = BackwardActivationParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_math.wgsl"
#include "common_entry_items.wgsl"

const ZERO: bool = {{ZERO}};  // round: a zero gradient even where dy is inf or NaN

// d/dv of 0.5 v (1 + tanh(u)), u = sqrt(2/pi) (v + 0.044715 v^3)
fn gelu_tanh_slope(v: f32) -> f32 {
    let t = tanh_safe(0.7978845608028654 * (v + 0.044715 * v * v * v));
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * v * v);
}

// d/dv of v sigmoid(v): s (1 + v (1 - s))
fn silu_slope(v: f32) -> f32 {
    let s = 1.0 / (1.0 + exp(-v));
    return s * (1.0 + v * (1.0 - s));
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let v = ld_f32(p.t + i);
    let y = {{FORWARD}};
    let g = ld_f32(p.dy + i);
    st_f32(p.dx + i, select(g * ({{SLOPE}}), 0.0, ZERO));
}

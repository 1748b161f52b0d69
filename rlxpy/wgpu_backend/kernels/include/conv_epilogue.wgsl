// finish(co, acc): acc + bias[co] (when has_bias), then the activation {{EXPR}} (an expression in v
// from elementwise.ACTIVATION_WGSL, or v itself).
#include "common_math.wgsl"

fn epilogue(v: f32) -> f32 {
    return {{EXPR}};
}
fn finish(co: u32, acc: f32) -> f32 {
    var v = acc;
    if (p.has_bias == 1u) {
        v = v + ld_f32(p.bias + co);
    }
    return epilogue(v);
}

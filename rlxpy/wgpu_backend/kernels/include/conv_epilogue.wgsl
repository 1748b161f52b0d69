// finish(co, index, acc): acc + bias[co] (when has_bias), + residual[index] (when has_residual; index
// = the output element's place in y), then the activation {{EXPR}} (an expression in v from
// elementwise.ACTIVATION_WGSL, or v itself). The additions in this order round as the separate
// add steps the conv epilogue pattern replaces.
#include "common_math.wgsl"

fn epilogue(v: f32) -> f32 {
    return {{EXPR}};
}
fn finish(co: u32, index: u32, acc: f32) -> f32 {
    var v = acc;
    if (p.has_bias == 1u) {
        v = v + ld_f32(p.bias + co);
    }
    if (p.has_residual == 1u) {
        v = v + ld_f32(p.residual + index);
    }
    return epilogue(v);
}

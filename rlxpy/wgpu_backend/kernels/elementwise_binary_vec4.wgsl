// y[i] = a[i] op b[i] like elementwise_binary, 4 elements per invocation through 16-byte loads and
// stores, for f32 operands and output whose element count and offsets are multiples of 4 (p.n counts
// vec4s, the offsets words).
#include "common_arena_vec4.wgsl"
#include "common_float.wgsl"
#include "common_entry_items.wgsl"
#include "elementwise_pow_float.wgsl"

fn binary_op(a: f32, b: f32) -> f32 {
    return {{EXPR}};
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let a = bitcast<vec4<f32>>(buf[(p.a >> 2u) + i]);
    let b = bitcast<vec4<f32>>(buf[(p.b >> 2u) + i]);
    buf[(p.y >> 2u) + i] = bitcast<vec4<u32>>(
        vec4<f32>(binary_op(a.x, b.x), binary_op(a.y, b.y), binary_op(a.z, b.z), binary_op(a.w, b.w)));
}

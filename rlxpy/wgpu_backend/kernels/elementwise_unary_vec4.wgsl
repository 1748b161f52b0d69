// y[i] = act(x[i]) like elementwise_unary, 4 elements per invocation through 16-byte loads and
// stores, for an f32 node whose element count and offsets are multiples of 4 (p.n counts vec4s, the
// offsets words).
// One 4-byte word per invocation moves about half of the copy bandwidth on an H200; 16-byte accesses
// are what torch's element-wise kernels use too (benches/RESULTS.md, element-wise bandwidth).
#include "common_arena_vec4.wgsl"
#include "common_math.wgsl"
#include "common_entry_items.wgsl"

fn act(v: f32) -> f32 {
    return {{CONVERT}};
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let v = bitcast<vec4<f32>>(buf[(p.x >> 2u) + i]);
    buf[(p.y >> 2u) + i] = bitcast<vec4<u32>>(vec4<f32>(act(v.x), act(v.y), act(v.z), act(v.w)));
}

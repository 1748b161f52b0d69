// F32 rows: one element per word.
#include "quant_gguf_float.wgsl"

fn float4(rb: u32, e: u32) -> vec4<f32> {
    let i = (rb >> 2u) + e;
    return vec4<f32>(bitcast<f32>(aw(i)), bitcast<f32>(aw(i + 1u)), bitcast<f32>(aw(i + 2u)),
                     bitcast<f32>(aw(i + 3u)));
}

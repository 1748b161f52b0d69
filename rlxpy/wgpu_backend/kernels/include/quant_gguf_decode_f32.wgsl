// F32 rows: one element per word.
#include "quant_gguf_float.wgsl"

fn float4(rb: u32, e: u32) -> vec4<f32> {
    let i = (rb >> 2u) + e;
    return vec4<f32>(bitcast<f32>(buf[i]), bitcast<f32>(buf[i + 1u]), bitcast<f32>(buf[i + 2u]),
                     bitcast<f32>(buf[i + 3u]));
}

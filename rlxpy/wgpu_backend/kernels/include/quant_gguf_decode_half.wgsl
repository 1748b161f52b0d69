// F16 / BF16 rows: two elements per word, widened by {{HALF}}_to_f32.
#include "quant_gguf_float.wgsl"

fn float4(rb: u32, e: u32) -> vec4<f32> {
    let a = ld_word(rb + e * BLOCK_BYTES);
    let b = ld_word(rb + e * BLOCK_BYTES + 4u);
    return vec4<f32>({{HALF}}_to_f32(a & 0xffffu), {{HALF}}_to_f32(a >> 16u), {{HALF}}_to_f32(b & 0xffffu),
                     {{HALF}}_to_f32(b >> 16u));
}

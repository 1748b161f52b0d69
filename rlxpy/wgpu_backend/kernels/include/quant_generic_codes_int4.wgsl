// codes4(e): W elements e .. e+3 as signed nibbles (int4, two per byte, low nibble first).
#include "quant_generic_decode.wgsl"

fn codes4(e: u32) -> vec4<f32> {
    let w = ld_word(p.w + (e >> 1u)) >> ((e & 1u) << 2u);
    let s = bitcast<i32>(w);
    return vec4<f32>(f32((s << 28u) >> 28u), f32((s << 24u) >> 28u), f32((s << 20u) >> 28u),
                     f32((s << 16u) >> 28u));
}

// codes4(e): W elements e .. e+3 as E2M1 nibbles (nvfp4, two per byte, low nibble first).
#include "quant_generic_decode.wgsl"

fn codes4(e: u32) -> vec4<f32> {
    let w = ld_word(p.w + (e >> 1u)) >> ((e & 1u) << 2u);
    return vec4<f32>(fp4_e2m1(w & 15u), fp4_e2m1((w >> 4u) & 15u),
                     fp4_e2m1((w >> 8u) & 15u), fp4_e2m1((w >> 12u) & 15u));
}

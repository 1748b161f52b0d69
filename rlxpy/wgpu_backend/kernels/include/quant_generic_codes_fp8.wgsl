// codes4(e): W elements e .. e+3 as FP8 bytes, decoded by {{FP8}} (fp8_e4m3 or fp8_e5m2).
#include "quant_generic_decode.wgsl"

fn codes4(e: u32) -> vec4<f32> {
    let w = ld_word(p.w + e);
    return vec4<f32>({{FP8}}(w & 0xffu), {{FP8}}((w >> 8u) & 0xffu),
                     {{FP8}}((w >> 16u) & 0xffu), {{FP8}}(w >> 24u));
}

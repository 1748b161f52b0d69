// Q4_K / Q5_K: d, dmin (f16) | scales[12] (8 six-bit scale/min pairs) | ...: the scale and min of
// sub-block sb (llama.cpp's get_scale_min_k4) of the block at byte b; the 12 scale bytes hold six-bit
// scales (bytes 0-3 + high bits) and mins (bytes 4-7 + high bits).
#include "quant_gguf_layout.wgsl"
#include "quant_gguf_unit.wgsl"

const IS_FLOAT: bool = false;
const HAS_MIN: bool = true;

fn kquant_scale_min(b: u32, sb: u32) -> vec2<f32> {
    let dd = aw(b >> 2u);
    var sc: u32;
    var mn: u32;
    if (sb < 4u) {
        sc = ld_byte(b + 4u + sb) & 63u;
        mn = ld_byte(b + 8u + sb) & 63u;
    } else {
        let packed = ld_byte(b + 8u + sb);
        sc = (packed & 15u) | ((ld_byte(b + sb) >> 2u) & 0x30u);
        mn = (packed >> 4u) | ((ld_byte(b + 4u + sb) >> 2u) & 0x30u);
    }
    let d = f16x2_to_f32(dd);
    return vec2<f32>(d.x * f32(sc), -(d.y * f32(mn)));
}

fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    return kquant_scale_min(block_at(rb, u), unit_in_block(u));
}

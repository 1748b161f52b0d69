// Q2_K: scales[16] (lo nibble: scale, hi: min, per 16 elements) | qs[64] | d, dmin (f16).
// Element E = 128h + 32j + l is bits 2j..2j+1 of qs[32h + l]; unit = 4h + j.
#include "quant_gguf_layout.wgsl"
#include "quant_gguf_unit.wgsl"

const IS_FLOAT: bool = false;
const HAS_MIN: bool = true;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let b = block_at(rb, u);
    let dd = aw((b + 80u) >> 2u);
    let sc = ld_byte(b + (unit_in_block(u) << 1u) + hf);
    let d = f16x2_to_f32(dd);
    return vec2<f32>(d.x * f32(sc & 15u), -(d.y * f32(sc >> 4u)));
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = block_at(rb, u);
    let ub = unit_in_block(u);
    let w = aw((b + 16u + ((ub >> 2u) << 5u) + (c << 2u)) >> 2u);
    return bytes4((w >> ((ub & 3u) << 1u)) & 0x03030303u);
}

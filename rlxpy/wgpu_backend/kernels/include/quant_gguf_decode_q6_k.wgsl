// Q6_K: ql[128] | qh[64] | scales[16] (i8, per 16 elements) | d (f16). Element 128h + 32q + l:
// nibble (q >> 1) of ql[64h + 32(q & 1) + l] | bits 2q.. of qh[32h + l] << 4, minus 32.
#include "quant_gguf_layout.wgsl"
#include "quant_gguf_unit.wgsl"

const IS_FLOAT: bool = false;
const HAS_MIN: bool = false;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let b = block_at(rb, u);
    let sc = bitcast<i32>(ld_byte(b + 192u + (unit_in_block(u) << 1u) + hf) << 24u) >> 24u;
    return vec2<f32>(f16x2_to_f32(ld_half(b + 208u)).x * f32(sc), 0.0);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = block_at(rb, u);
    let ub = unit_in_block(u);
    let h = ub >> 2u;
    let q = ub & 3u;
    let lo = (ld_word(b + (h << 6u) + ((q & 1u) << 5u) + (c << 2u)) >> ((q >> 1u) << 2u)) & 0x0f0f0f0fu;
    let hi = (ld_word(b + 128u + (h << 5u) + (c << 2u)) >> (q << 1u)) & 0x03030303u;
    return bytes4(lo | (hi << 4u)) - vec4<f32>(32.0);
}

// Q3_K: hmask[32] | qs[64] | scales[12] (16 six-bit scales, -32) | d (f16).
// Element E = 128h + 32j + l: 2 bits of qs[32h + l] at 2j, minus 4 unless bit (4h + j) of hmask[l].
#include "quant_gguf_layout.wgsl"
#include "quant_gguf_unit.wgsl"

const IS_FLOAT: bool = false;
const HAS_MIN: bool = false;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let b = block_at(rb, u);
    let s = (unit_in_block(u) << 1u) + hf;
    let lo = (ld_byte(b + 96u + (s & 7u)) >> ((s >> 3u) << 2u)) & 15u;
    let hi = (ld_byte(b + 104u + (s & 3u)) >> ((s >> 2u) << 1u)) & 3u;
    return vec2<f32>(f16x2_to_f32(ld_half(b + 108u)).x * f32(i32(lo | (hi << 4u)) - 32), 0.0);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = block_at(rb, u);
    let ub = unit_in_block(u);
    let ql = (ld_word(b + 32u + ((ub >> 2u) << 5u) + (c << 2u)) >> ((ub & 3u) << 1u)) & 0x03030303u;
    let hm = (ld_word(b + (c << 2u)) >> ub) & 0x01010101u;
    return bytes4(ql | (hm << 2u)) - vec4<f32>(4.0);
}

// Q5_0: d (f16) | qh (u32: bit j = 5th bit of element j) | qs[16]: value = d * (q5 - 16).
#include "quant_gguf_scale_d.wgsl"
#include "quant_gguf_nibbles.wgsl"

fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = block_at(rb, u);
    let lo = (ld_word(b + 6u + ((c & 3u) << 2u)) >> ((c >> 2u) << 2u)) & 0x0f0f0f0fu;
    return bytes4(lo | qh_bits(ld_word(b + 2u) >> (c << 2u))) - vec4<f32>(16.0);
}
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let b = block_at(rb, u);
    return nibble_unit(ld_word(b + 6u), ld_word(b + 10u), ld_word(b + 14u), ld_word(b + 18u), ld_word(b + 2u),
                       vec4<f32>(16.0));
}

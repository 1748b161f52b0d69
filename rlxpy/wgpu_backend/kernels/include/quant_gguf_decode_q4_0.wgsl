// Q4_0: d (f16) | qs[16]: element j = nibble (j < 16: low of qs[j], else high of qs[j-16]) - 8.
#include "quant_gguf_scale_d.wgsl"
#include "quant_gguf_nibbles.wgsl"

fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let w = ld_word(block_at(rb, u) + 2u + ((c & 3u) << 2u));
    return bytes4((w >> ((c >> 2u) << 2u)) & 0x0f0f0f0fu) - vec4<f32>(8.0);
}
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let b = block_at(rb, u) + 2u;
    return nibble_unit(ld_word(b), ld_word(b + 4u), ld_word(b + 8u), ld_word(b + 12u), 0u, vec4<f32>(8.0));
}

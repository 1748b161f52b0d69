// Q5_1: d, m (f16) | qh (u32) | qs[16]: value = d * q5 + m (24-byte blocks stay word aligned).
#include "quant_gguf_scale_dm.wgsl"
#include "quant_gguf_nibbles.wgsl"

fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let i = block_at(rb, u) >> 2u;
    let lo = (aw(i + 2u + (c & 3u)) >> ((c >> 2u) << 2u)) & 0x0f0f0f0fu;
    return bytes4(lo | qh_bits(aw(i + 1u) >> (c << 2u)));
}
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let i = block_at(rb, u) >> 2u;
    return nibble_unit(aw(i + 2u), aw(i + 3u), aw(i + 4u), aw(i + 5u), aw(i + 1u), vec4<f32>(0.0));
}

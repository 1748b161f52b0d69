// Q4_1: d, m (f16) | qs[16]: value = d * nibble + m (20-byte blocks stay word aligned).
#include "quant_gguf_scale_dm.wgsl"
#include "quant_gguf_nibbles.wgsl"

fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let w = aw((block_at(rb, u) >> 2u) + 1u + (c & 3u));
    return bytes4((w >> ((c >> 2u) << 2u)) & 0x0f0f0f0fu);
}
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let i = (block_at(rb, u) >> 2u) + 1u;
    return nibble_unit(aw(i), aw(i + 1u), aw(i + 2u), aw(i + 3u), 0u, vec4<f32>(0.0));
}

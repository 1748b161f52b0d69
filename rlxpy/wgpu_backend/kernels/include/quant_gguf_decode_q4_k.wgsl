// Q4_K: d, dmin (f16) | scales[12] | qs[128]: sub-block sb of 32 elements is the (sb & 1) nibble of
// qs[32 * (sb >> 1) ..]; value = d*sc * q - dmin*m.
#include "quant_gguf_kquant.wgsl"

fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = block_at(rb, u);
    let sb = unit_in_block(u);
    let w = aw((b + 16u + ((sb >> 1u) << 5u) + (c << 2u)) >> 2u);
    return bytes4((w >> ((sb & 1u) << 2u)) & 0x0f0f0f0fu);
}

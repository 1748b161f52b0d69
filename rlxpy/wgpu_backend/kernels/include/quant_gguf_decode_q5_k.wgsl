// Q5_K: as Q4_K plus qh[32] before qs: bit sb of qh[l] is the 5th bit of element l of sub-block sb.
#include "quant_gguf_kquant.wgsl"

fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = block_at(rb, u);
    let sb = unit_in_block(u);
    let lo = (aw((b + 48u + ((sb >> 1u) << 5u) + (c << 2u)) >> 2u) >> ((sb & 1u) << 2u)) & 0x0f0f0f0fu;
    let hi = (aw((b + 16u + (c << 2u)) >> 2u) >> sb) & 0x01010101u;
    return bytes4(lo | (hi << 4u));
}

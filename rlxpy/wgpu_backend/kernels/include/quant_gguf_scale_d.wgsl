// The 32-element types with one f16 scale d at the start of each block and no min (Q4_0, Q5_0, Q8_0).
#include "quant_gguf_layout.wgsl"

const IS_FLOAT: bool = false;
const HAS_MIN: bool = false;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    return vec2<f32>(f16x2_to_f32(ld_half(block_at(rb, u))).x, 0.0);
}

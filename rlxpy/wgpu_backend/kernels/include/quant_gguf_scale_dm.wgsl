// The 32-element types with an f16 scale d and min m at the start of each block (Q4_1, Q5_1; their
// blocks stay word aligned).
#include "quant_gguf_layout.wgsl"

const IS_FLOAT: bool = false;
const HAS_MIN: bool = true;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let h = aw(block_at(rb, u) >> 2u);
    return f16x2_to_f32(h);
}

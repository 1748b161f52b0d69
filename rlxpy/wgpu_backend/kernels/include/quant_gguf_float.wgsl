// The float types' decoder (F32, F16, BF16): each supplies float4(rb, e), elements e .. e+3 of the row
// at byte rb; scale 1, offset 0, and elements past the row end (the next row's, or nothing) are zero.
#include "quant_gguf_layout.wgsl"
#include "quant_gguf_unit.wgsl"

const IS_FLOAT: bool = true;
const HAS_MIN: bool = false;

fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> { return vec2<f32>(1.0, 0.0); }

fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let e = (u << 5u) + (c << 2u);
    let v = float4(rb, e);
    // elements past the row end belong to the next row (or to nothing): zero them
    return select(v, vec4<f32>(0.0), vec4<u32>(e) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(p.k));
}

// y = cast(x) where x or y is f16/bf16, through f32; f32 -> f16/bf16 rounds to nearest even like torch .to().
// One thread per element pair (2t, 2t+1): a 2-byte output pair is one whole word, so no two threads share a word.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseCastHalfParams (n elements; x, y word offsets in the window).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_float.wgsl"
#include "common_half.wgsl"

// f32 -> binary16 bits, round to nearest even, overflow -> inf, NaN -> quiet NaN (torch's fp16_ieee_from_fp32_value).
// Integer arithmetic only, so a GPU that flushes subnormal floats still rounds correctly.
fn f32_to_f16(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    let sign = (bits >> 16u) & 0x8000u;
    let magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) {
        return sign | 0x7e00u;
    }
    if (magnitude >= 0x477ff000u) {  // >= 65520 (halfway past 65504) rounds to inf
        return sign | 0x7c00u;
    }
    if (magnitude >= 0x38800000u) {  // normal half: rebias the exponent, round off 13 mantissa bits
        let rebased = magnitude - 0x38000000u;
        return sign | ((rebased + 0x0fffu + ((rebased >> 13u) & 1u)) >> 13u);
    }
    // subnormal half or zero: value = mantissa * 2^(exponent - 150), counted in units of 2^-24
    let shift = 126u - (magnitude >> 23u);
    if (shift > 24u) {
        return sign;
    }
    let mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    let units = mantissa >> shift;
    let rest = mantissa & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    let up = rest > half || (rest == half && (units & 1u) == 1u);
    return sign | (units + select(0u, 1u, up));
}

// f32 -> bfloat16 bits, round to nearest even; NaN -> 0x7fc0 (c10::BFloat16's round_to_nearest_even).
fn f32_to_bf16(v: f32) -> u32 {
    if (is_nan(v)) {
        return 0x7fc0u;
    }
    let bits = bitcast<u32>(v);
    return (bits + 0x7fffu + ((bits >> 16u) & 1u)) >> 16u;
}

// The 16 bits of 2-byte element e of the source.
fn half_at(e: u32) -> u32 {
    return (buf[p.x + e / 2u] >> ((e % 2u) * 16u)) & 0xffffu;
}

// Source element e as f32.
fn load(e: u32) -> f32 {
    return {{LOAD}};
}

#include "elementwise_cast_half_to_{{TO}}.wgsl"
#include "common_entry_items.wgsl"

fn run_item(t: u32) {
    if (2u * t >= p.n) {
        return;
    }
    let has_b = 2u * t + 1u < p.n;
    var b = 0.0;
    if (has_b) {
        b = load(2u * t + 1u);
    }
    store_pair(t, load(2u * t), b, has_b);
}

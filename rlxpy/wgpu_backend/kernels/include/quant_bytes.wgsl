// Bytes of packed weights in the u32 arena (quant_generic_*, quant_gguf_*; ``b`` a byte offset):
// byte and 2-byte loads, 4 bytes at any offset, and a word's four bytes as exact f32 integers.
#include "common_half.wgsl"

fn ld_byte(b: u32) -> u32 { return (aw(b >> 2u) >> ((b & 3u) << 3u)) & 0xffu; }
// two bytes at an even byte offset (GGML blocks are at least 2-byte aligned)
fn ld_half(b: u32) -> u32 { return (aw(b >> 2u) >> ((b & 2u) << 3u)) & 0xffffu; }
// four bytes at any byte offset, little-endian: a funnel shift of the two words holding them
// (branch-free: lanes of one warp often disagree on alignment, e.g. odd and even Q8_0 blocks)
fn ld_word(b: u32) -> u32 {
    let i = b >> 2u;
    let s = (b & 3u) << 3u;
    let lo = aw(i);
    return select((lo >> s) | (aw(i + 1u) << (32u - s)), lo, s == 0u);
}
// the four bytes of w as unsigned / signed integers in f32, exactly: OR-ing a byte into the
// mantissa of 2^23 and subtracting 2^23 avoids integer->float conversions (quarter rate on GPUs)
fn bytes4(w: u32) -> vec4<f32> {
    let v = (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return bitcast<vec4<f32>>(v | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0);
}
fn sbytes4(w: u32) -> vec4<f32> {
    let v = (vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);  // s + 128
    return bitcast<vec4<f32>>(v | vec4<u32>(0x4b000000u)) - vec4<f32>(8388736.0);
}

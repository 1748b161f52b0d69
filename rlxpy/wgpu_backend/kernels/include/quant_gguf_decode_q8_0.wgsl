// Q8_0: d (f16) | qs[32] (i8): value = d * q.
#include "quant_gguf_scale_d.wgsl"

fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    return sbytes4(ld_word(block_at(rb, u) + 2u + (c << 2u)));
}
// quant word j of a block at byte 0 mod 4 (a, b: words j, j + 1) or 2 mod 4 (b: word j + 1)
fn q8_word(a: u32, b: u32, odd: bool) -> u32 {
    return select((a >> 16u) | (b << 16u), b, odd);
}
// the 32 quants from the nine words that cover the block (blocks are 2-byte aligned): nine loads
// instead of two per ld_word
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let b = block_at(rb, u);
    let i = b >> 2u;
    let odd = (b & 2u) != 0u;
    let w0 = aw(i);
    let w1 = aw(i + 1u);
    let w2 = aw(i + 2u);
    let w3 = aw(i + 3u);
    let w4 = aw(i + 4u);
    let w5 = aw(i + 5u);
    let w6 = aw(i + 6u);
    let w7 = aw(i + 7u);
    let w8 = aw(i + 8u);
    return array<vec4<f32>, 8>(sbytes4(q8_word(w0, w1, odd)), sbytes4(q8_word(w1, w2, odd)),
                               sbytes4(q8_word(w2, w3, odd)), sbytes4(q8_word(w3, w4, odd)),
                               sbytes4(q8_word(w4, w5, odd)), sbytes4(q8_word(w5, w6, odd)),
                               sbytes4(q8_word(w6, w7, odd)), sbytes4(q8_word(w7, w8, odd)));
}

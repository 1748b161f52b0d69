// GGML block formats as the quant_gguf_* kernels decode them. A weight row (``rb`` = its byte offset in
// the arena) is cut into *units* of 32 consecutive elements; a unit splits into two halves of 16 (the
// smallest K-quant scale group) and eight chunks of 4 elements. Each type's decoder
// (quant_gguf_decode_<type>.wgsl) supplies
//
// * q_scale(rb, u, hf) -> vec2<f32>: (scale, offset) of half hf of unit u;
// * q_chunk(rb, u, c) -> vec4<f32>: the integer quants of elements 4c .. 4c+3 of unit u;
// * q_unit(rb, u) -> array<vec4<f32>, 8>: all eight chunks, loading each word once;
// * IS_FLOAT, HAS_MIN,
//
// so that value = scale * q (+ offset when HAS_MIN): the same f32 operations, in the same order, as
// gguf-py's quants.dequantize_blocks (llama.cpp's dequantize_row_*). Every product scale * q is exact
// in f32 (an f16 scale times at most 13 more bits), so a fused multiply-add gives the same bits as the
// separate product and sum: dequantised values match gguf-py bit for bit. Float types (F32/F16/BF16)
// mask elements past p.k (rows need not be a multiple of 32 there), which is why every kernel's params
// carry a field k. Blocks are not 4-byte aligned in general (Q4_0 = 18 bytes, Q8_0 = 34): ld_word
// reads 4 bytes at any byte offset.
//
// The block geometry is gguf-py's GGML_QUANT_SIZES (lowering/quant_gguf.py fills it in), not written here.
#include "quant_bytes.wgsl"

const BLOCK_BYTES: u32 = {{BLOCK_BYTES}}u;  // bytes per block (per element for float types)
const UNIT_SHIFT: u32 = {{UNIT_SHIFT}}u;  // log2 of the 32-element units per block (0 for 32-element blocks)

// byte offset of the block holding unit u
fn block_at(rb: u32, u: u32) -> u32 {
    return rb + (u >> UNIT_SHIFT) * BLOCK_BYTES;
}

// index of unit u within its block
fn unit_in_block(u: u32) -> u32 {
    return u & ((1u << UNIT_SHIFT) - 1u);
}

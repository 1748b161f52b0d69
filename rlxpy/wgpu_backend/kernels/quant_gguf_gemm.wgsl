// y = x @ dequant(W)^T for many x rows (prefill): matmul_tiled's GEMM (include/matmul_tiled_core.wgsl,
// TRANS_B: W is stored [N, K]) with the weight left as GGML blocks in the arena and dequantised in the
// fetch, 4 k of one weight row at a time (include/quant_gguf_dq4.wgsl, the same values as gguf-py).
// The arena access is matmul_tiled's (vec4 words where x, y, K and N sit on 4-element boundaries); the
// decoders read single words through aw().
// p.w_bytes: the weight's byte offset, p.row_bytes: bytes per weight row; p.w (+ the split's stride):
// the first k of the chunk this workgroup sums. K is a multiple of 4 (the lowerer's condition).
// Bindings: 0 = arena window, 1 = MatmulTiledParams.
#include "matmul_access_{{ACCESS}}.wgsl"
#include "quant_gguf_decode_{{DECODER}}.wgsl"
#include "quant_gguf_dq4.wgsl"

// W[col, base + k .. +3] as the transposed operand's w[k .. k+3, col]; zero outside (col past N, k past
// the chunk). Branch-free: a load outside decodes row N - 1 at the chunk's last 4 k and is dropped.
fn load_w_t(base: u32, k: u32, col: u32) -> vec4<f32> {
    let inside = col < p.n && k < p.k_len;
    let v = dq4(p.w_bytes + min(col, p.n - 1u) * p.row_bytes, base + min(k, p.k_len - 4u));
    return select(vec4<f32>(), v, inside);
}
// x is never transposed here (TRANS_A = false): the core's transposed-a branch is dead code.
fn load_a_t(base: u32, row: u32, k: u32) -> vec4<f32> {
    return vec4<f32>();
}
#include "matmul_tiled_core.wgsl"

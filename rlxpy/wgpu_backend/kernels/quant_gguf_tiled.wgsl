// y[r, j] = sum_i x[r, i] * dequant(W)[j, i] for many x rows (prefill): W = GGML blocks read in place.
// 16x16 invocations own a 64x64 output tile (quant_tiled.wgsl); per K step of 16 each dequantises 4
// weights of one weight row into workgroup memory.
// Bindings: 0 = arena window (u32 words; x, y word offsets, w a BYTE offset), 1 = QuantGgufTiledParams.
#include "common_arena.wgsl"
#include "quant_gguf_decode_{{DECODER}}.wgsl"
#include "quant_gguf_dq4.wgsl"
#include "quant_tiled.wgsl"

// elements k0 .. k0 + 15 of weight rows col0 .. col0 + 63 into tile_w [16 k][64 weight rows]
fn stage_w(flat: u32, k0: u32, col0: u32) {
    let w_col = flat >> 2u;  // weight row (output column) this invocation dequantises
    let w_part = (flat & 3u) << 2u;  // its 4 elements within the K step
    var wv = vec4<f32>(0.0);
    let e = k0 + w_part;
    if (col0 + w_col < p.n && e < p.k) {
        wv = dq4(p.w + (col0 + w_col) * p.row_bytes, e);
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        tile_w[(w_part + i) * 64u + w_col] = wv[i];
    }
}

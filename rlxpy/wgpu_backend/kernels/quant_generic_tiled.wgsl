// y[r, c] = sum_kk x[r, kk] * dequant(W)[kk, c] for many x rows; W [K, N] row-major, packed per scheme.
// 16x16 invocations own a 64x64 output tile (quant_tiled.wgsl); per K step of 16 each dequantises 4
// adjacent columns of one W row into workgroup memory.
// Bindings: 0 = arena window (u32 words; x, y, zp word offsets, w and nvfp4 scale BYTE offsets), 1 = QuantGenericTiledParams.
#include "common_arena.wgsl"
#include "quant_generic_codes_{{CODES}}.wgsl"
#include "quant_generic_scale_{{SCALE}}.wgsl"
#include "quant_tiled.wgsl"

// W rows k0 .. k0 + 15 of columns col0 .. col0 + 63 into tile_w [16 k][64 cols]
fn stage_w(flat: u32, k0: u32, col0: u32) {
    let w_row = flat >> 4u;  // K row of the tile this invocation dequantises
    let w_col = (flat & 15u) << 2u;  // its first of 4 columns
    let kk = k0 + w_row;
    let col = col0 + w_col;
    var wv = vec4<f32>(0.0);
    if (kk < p.k && col < p.n) {
        let aff = affine4(kk / p.block, col);  // one division per K step, not per element
        wv = (codes4(kk * p.n + col) - aff.zero) * aff.scale;
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        tile_w[w_row * 64u + w_col + i] = wv[i];
    }
}

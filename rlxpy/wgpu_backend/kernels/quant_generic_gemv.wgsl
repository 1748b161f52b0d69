// y[r, c] = sum_kk x[r, kk] * dequant(W)[kk, c] for few x rows; W [K, N] row-major, packed per scheme.
// One thread per 4 consecutive columns (1-D grid folded into y); it walks K block by block, loading the block's scales once.
// A dispatch walks blocks [first, last) and stores (accumulate = 0) or adds its sums (lavapipe's loop limit splits K).
// Bindings: 0 = arena window (u32 words; x, y, zp word offsets, w and nvfp4 scale BYTE offsets), 1 = QuantGenericGemvParams.
#include "common_arena.wgsl"
#include "quant_generic_codes_{{CODES}}.wgsl"
#include "quant_generic_scale_{{SCALE}}.wgsl"
#include "common_entry_items.wgsl"

const MR: u32 = {{MR}}u;

fn run_item(t: u32) {
    let col = t * 4u;
    if (col >= p.n) {
        return;
    }
    var acc = array<vec4<f32>, MR>();
    var kk = p.first * p.block;
    for (var blk = p.first; blk < p.last; blk = blk + 1u) {
        let aff = affine4(blk, col);
        let end = min(p.k, kk + p.block);
        for (; kk < end; kk = kk + 1u) {
            let v = (codes4(kk * p.n + col) - aff.zero) * aff.scale;
            for (var r = 0u; r < MR; r = r + 1u) {
                acc[r] = acc[r] + bitcast<f32>(buf[p.x + r * p.k + kk]) * v;
            }
        }
    }
    for (var r = 0u; r < MR; r = r + 1u) {
        if (r < p.m) {
            for (var i = 0u; i < 4u; i = i + 1u) {
                if (col + i < p.n) {
                    let at = p.y + r * p.n + col + i;
                    buf[at] = bitcast<u32>(select(acc[r][i], bitcast<f32>(buf[at]) + acc[r][i], p.accumulate != 0u));
                }
            }
        }
    }
}

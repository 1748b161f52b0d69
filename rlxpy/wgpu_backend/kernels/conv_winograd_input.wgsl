// Winograd F(m x m, 3x3), input transform: V[t][ci][col] = (B^T d B)[t / n][t % n] for the n x n input
// patch d (n = m + 2) of output tile col = (image, th, tw): input rows m*th - p_h .., columns
// m*tw - p_w ..; zeros outside x. B^T is generated from exact rationals by
// lowering/conv_winograd_transforms.py and written out where TRANSFORM stands. Columns from `tiles` up to
// `cols` (a multiple of 4, so the GEMM reads vec4s) are zeros. One invocation per (ci, col), col
// fastest: neighbouring invocations read neighbouring patches and write neighbouring words.
// Bindings: 0 = arena window (u32 words), 1 = ConvWinogradParams (element offsets).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

const TILE: u32 = {{TILE}}u;  // outputs per tile side (m)

// x[base + ih * in_w + iw] where 0 <= ih < rows and (ih, iw) lies in the input, else 0.0 (rows = 0:
// a padding column, all zeros)
fn x_or_zero(base: u32, rows: i32, ih: i32, iw: i32) -> f32 {
    if (ih < 0 || ih >= rows || iw < 0 || iw >= i32(p.in_w)) {
        return 0.0;
    }
    return ld_f32(base + u32(ih) * p.in_w + u32(iw));
}

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let col = i % p.cols;
    let ci = i / p.cols;
    let per_image = p.tiles_h * p.tiles_w;
    let image = col / per_image;  // past the batch for a padding column, which reads nothing
    let ih = i32(TILE * ((col % per_image) / p.tiles_w)) - p.p_h;
    let iw = i32(TILE * (col % p.tiles_w)) - p.p_w;
    let rows = select(0, i32(p.in_h), col < p.tiles);
    let base = p.x + (image * p.c_in + ci) * p.in_h * p.in_w;
    let plane = p.c_in * p.cols;
    let first = p.v + i;
{{TRANSFORM}}
}

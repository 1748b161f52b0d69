// Winograd F(m x m, 3x3), the GEMM's operands (n = m + 2 points per axis; the transforms' entries are
// generated from exact rationals by lowering/conv_winograd_transforms.py and written out where
// WEIGHTS and INPUT stand). Items [0, w_items) transform the weights, the rest the input; a dispatch
// runs items item0 .. total - 1 (all of them, or one of the two parts):
// * weights: U[t][co][ci] = (G g G^T)[t / n][t % n] for the 3x3 kernel g = w[co, ci], one item per
//   (co, ci); U's n * n matrices [c_out, c_in] are the GEMM's a operands;
// * input: V[t][ci][col] = (B^T d B)[t / n][t % n] for the n x n input patch d of output tile
//   col = (image, th, tw): input rows m*th - p_h .., columns m*tw - p_w ..; zeros outside x. One item
//   per (ci, col), col fastest (neighbouring items read neighbouring patches and write neighbouring
//   words). Columns from `tiles` up to `cols` (a multiple of 4, so the GEMM reads vec4s) are zeros.
// Bindings: 0 = arena window (u32 words), 1 = ConvWinogradParams (element offsets).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

const TILE: u32 = {{TILE}}u;  // outputs per tile side (m)

fn weight_item(i: u32) {
    let src = p.w + i * 9u;  // w[co, ci] is 9 consecutive words: i = co * c_in + ci
    let plane = p.c_out * p.c_in;
    let first = p.u + i;
{{WEIGHTS}}
}

// x[base + ih * in_w + iw] where 0 <= ih < rows and (ih, iw) lies in the input, else 0.0 (rows = 0:
// a padding column, all zeros)
fn x_or_zero(base: u32, rows: i32, ih: i32, iw: i32) -> f32 {
    if (ih < 0 || ih >= rows || iw < 0 || iw >= i32(p.in_w)) {
        return 0.0;
    }
    return ld_f32(base + u32(ih) * p.in_w + u32(iw));
}

fn input_item(i: u32) {
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
{{INPUT}}
}

fn run_item(i: u32) {
    let j = p.item0 + i;
    if (j >= p.total) {
        return;
    }
    if (j < p.w_items) {
        weight_item(j);
    } else {
        input_item(j - p.w_items);
    }
}

// Winograd F(2x2, 3x3), input transform: V[t][ci][col] = (B^T d B)[t / 4][t % 4] for the 4x4 input
// patch d of output tile col = (n, th, tw) (input rows 2th - p_h .., columns 2tw - p_w ..; zeros outside
// x), B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]. Columns from `tiles` up to
// `cols` (a multiple of 4, so the GEMM reads vec4s) are zeros. One invocation per (ci, col), col
// fastest: neighbouring invocations read neighbouring patches and write neighbouring words.
// Bindings: 0 = arena window (u32 words), 1 = ConvWinogradParams (element offsets).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

// B^T applied to four values
fn bt(d: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(d.x - d.z, d.y + d.z, d.z - d.y, d.y - d.w);
}

fn load_row(base: u32, ih: i32, iw: i32) -> vec4<f32> {
    var row = vec4<f32>(0.0);
    if (ih < 0 || ih >= i32(p.in_h)) {
        return row;
    }
    for (var j = 0; j < 4; j = j + 1) {
        let c = iw + j;
        if (c >= 0 && c < i32(p.in_w)) {
            row[j] = ld_f32(base + u32(ih) * p.in_w + u32(c));
        }
    }
    return row;
}

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let col = i % p.cols;
    let ci = i / p.cols;
    var v: array<vec4<f32>, 4>;  // rows of B^T d B
    if (col < p.tiles) {
        let per_image = p.tiles_h * p.tiles_w;
        let n = col / per_image;
        let th = (col % per_image) / p.tiles_w;
        let tw = col % p.tiles_w;
        let ih = i32(2u * th) - p.p_h;
        let iw = i32(2u * tw) - p.p_w;
        let base = p.x + (n * p.c_in + ci) * p.in_h * p.in_w;
        let d0 = load_row(base, ih, iw);
        let d1 = load_row(base, ih + 1, iw);
        let d2 = load_row(base, ih + 2, iw);
        let d3 = load_row(base, ih + 3, iw);
        v[0] = bt(d0 - d2);  // B^T over the rows, then over each row's columns
        v[1] = bt(d1 + d2);
        v[2] = bt(d2 - d1);
        v[3] = bt(d1 - d3);
    }
    let plane = p.c_in * p.cols;
    for (var r = 0u; r < 4u; r = r + 1u) {
        for (var c = 0u; c < 4u; c = c + 1u) {
            st_f32(p.v + (r * 4u + c) * plane + i, v[r][c]);
        }
    }
}

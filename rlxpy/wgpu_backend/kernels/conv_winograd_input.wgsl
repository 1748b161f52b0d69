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

// x[base + ih * in_w + c] where (ih, c) lies in the input, else 0.0
fn at_or_zero(base: u32, ih: i32, c: i32) -> f32 {
    if (c < 0 || c >= i32(p.in_w)) {
        return 0.0;
    }
    return ld_f32(base + u32(ih) * p.in_w + u32(c));
}

// Four neighbouring elements of input row ih from column iw on (each written out: a dynamically
// indexed vector or array could live in local memory).
fn load_row(base: u32, ih: i32, iw: i32) -> vec4<f32> {
    if (ih < 0 || ih >= i32(p.in_h)) {
        return vec4<f32>(0.0);
    }
    return vec4<f32>(at_or_zero(base, ih, iw), at_or_zero(base, ih, iw + 1), at_or_zero(base, ih, iw + 2),
                     at_or_zero(base, ih, iw + 3));
}

// One row r of B^T d B to points 4r .. 4r+3.
fn store_row(i: u32, plane: u32, r: u32, v: vec4<f32>) {
    let first = p.v + 4u * r * plane + i;
    st_f32(first, v.x);
    st_f32(first + plane, v.y);
    st_f32(first + 2u * plane, v.z);
    st_f32(first + 3u * plane, v.w);
}

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let col = i % p.cols;
    let ci = i / p.cols;
    var d0 = vec4<f32>(0.0);
    var d1 = vec4<f32>(0.0);
    var d2 = vec4<f32>(0.0);
    var d3 = vec4<f32>(0.0);
    if (col < p.tiles) {
        let per_image = p.tiles_h * p.tiles_w;
        let n = col / per_image;
        let th = (col % per_image) / p.tiles_w;
        let tw = col % p.tiles_w;
        let ih = i32(2u * th) - p.p_h;
        let iw = i32(2u * tw) - p.p_w;
        let base = p.x + (n * p.c_in + ci) * p.in_h * p.in_w;
        d0 = load_row(base, ih, iw);
        d1 = load_row(base, ih + 1, iw);
        d2 = load_row(base, ih + 2, iw);
        d3 = load_row(base, ih + 3, iw);
    }
    let plane = p.c_in * p.cols;  // B^T over the rows, then over each row's columns
    store_row(i, plane, 0u, bt(d0 - d2));
    store_row(i, plane, 1u, bt(d1 + d2));
    store_row(i, plane, 2u, bt(d2 - d1));
    store_row(i, plane, 3u, bt(d1 - d3));
}

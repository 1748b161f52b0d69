// Winograd F(2x2, 3x3), output transform: the 2x2 outputs of tile col = (n, th, tw) for channel co are
// A^T M A of the 16 GEMM results M[t][co][col], A^T = [[1, 1, 1, 0], [0, 1, -1, -1]], then bias,
// residual and activation (conv_epilogue's finish). A tile whose M holds a NaN or inf is recomputed directly
// (sum over ci and the 9 taps, padding zeros multiplied): the transforms would spread a non-finite
// input over the whole 4x4 patch and turn inf into inf - inf = NaN, where the conv's definition keeps
// it to the taps that read it. One invocation per (co, col), col fastest.
// Bindings: 0 = arena window (u32 words), 1 = ConvWinogradParams (element offsets).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_epilogue.wgsl"
#include "common_entry_items.wgsl"

fn finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u;
}

// A^T applied to four values
fn at(m: vec4<f32>) -> vec2<f32> {
    return vec2<f32>(m.x + m.y + m.z, m.y - m.z - m.w);
}

// The conv at output (oh, ow) of image n, channel co, summed directly.
fn direct(n: u32, co: u32, oh: u32, ow: u32) -> f32 {
    var acc = 0.0;
    for (var ci = 0u; ci < p.c_in; ci = ci + 1u) {
        let base = p.x + (n * p.c_in + ci) * p.in_h * p.in_w;
        let wb = p.w + (co * p.c_in + ci) * 9u;
        for (var t = 0u; t < 9u; t = t + 1u) {
            let ih = i32(oh + t / 3u) - p.p_h;
            let iw = i32(ow + t % 3u) - p.p_w;
            var xv = 0.0;
            if (ih >= 0 && ih < i32(p.in_h) && iw >= 0 && iw < i32(p.in_w)) {
                xv = ld_f32(base + u32(ih) * p.in_w + u32(iw));
            }
            acc = acc + xv * ld_f32(wb + t);
        }
    }
    return acc;
}

// Points 4r .. 4r+3 of M (row r of the tile's 4 x 4).
fn load_row(i: u32, plane: u32, r: u32) -> vec4<f32> {
    let first = p.mt + 4u * r * plane + i;
    return vec4<f32>(ld_f32(first), ld_f32(first + plane), ld_f32(first + 2u * plane),
                     ld_f32(first + 3u * plane));
}

fn finite4(v: vec4<f32>) -> bool {
    return finite(v.x) && finite(v.y) && finite(v.z) && finite(v.w);
}

// Output (oh, ow) of image n, channel co: the transform's value, or the direct sum where the tile is
// not finite; nothing past the output's edge (a tile of an odd size is half empty).
fn store_y(n: u32, co: u32, oh: u32, ow: u32, value: f32, ok: bool) {
    if (oh >= p.out_h || ow >= p.out_w) {
        return;
    }
    var acc = value;
    if (!ok) {
        acc = direct(n, co, oh, ow);
    }
    let index = ((n * p.c_out + co) * p.out_h + oh) * p.out_w + ow;
    st_f32(p.y + index, finish(co, index, acc));
}

fn run_item(i: u32) {
    let col = i % p.cols;
    let co = i / p.cols;
    if (i >= p.total || col >= p.tiles) {
        return;
    }
    let plane = p.c_out * p.cols;
    let m0 = load_row(i, plane, 0u);
    let m1 = load_row(i, plane, 1u);
    let m2 = load_row(i, plane, 2u);
    let m3 = load_row(i, plane, 3u);
    let ok = finite4(m0) && finite4(m1) && finite4(m2) && finite4(m3);
    let y0 = at(m0 + m1 + m2);  // A^T over the rows, then over the columns of each of the two rows
    let y1 = at(m1 - m2 - m3);
    let per_image = p.tiles_h * p.tiles_w;
    let n = col / per_image;
    let oh = 2u * ((col % per_image) / p.tiles_w);
    let ow = 2u * (col % p.tiles_w);
    store_y(n, co, oh, ow, y0.x, ok);
    store_y(n, co, oh, ow + 1u, y0.y, ok);
    store_y(n, co, oh + 1u, ow, y1.x, ok);
    store_y(n, co, oh + 1u, ow + 1u, y1.y, ok);
}

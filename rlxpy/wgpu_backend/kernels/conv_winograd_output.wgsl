// Winograd F(m x m, 3x3), output transform: the m x m outputs of tile col = (image, th, tw) for channel
// co are A^T M A of the n * n GEMM results M[t][co][col] (n = m + 2; A^T generated from exact
// rationals by lowering/conv_winograd_transforms.py and written out where TRANSFORM stands), then bias,
// residual and activation (conv_epilogue's finish). A tile whose M holds a NaN or inf is recomputed
// directly (sum over ci and the 9 taps, padding zeros multiplied): the transforms would spread a
// non-finite input over the whole patch and turn inf into inf - inf = NaN, where the conv's
// definition keeps it to the taps that read it. One invocation per (co, col), col fastest.
// Bindings: 0 = arena window (u32 words), 1 = ConvWinogradParams (element offsets).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_epilogue.wgsl"
#include "common_entry_items.wgsl"

const TILE: u32 = {{TILE}}u;  // outputs per tile side (m)

// |x|'s bits: at least 0x7f800000 exactly for an inf or NaN (the largest over a tile tells whether all are finite)
fn magnitude(x: f32) -> u32 {
    return bitcast<u32>(x) & 0x7fffffffu;
}

// x at (ih, iw) of the plane at base where it lies in the input, else 0.0 (a padding tap)
fn x_tap(base: u32, ih: i32, iw: i32) -> f32 {
    if (ih < 0 || ih >= i32(p.in_h) || iw < 0 || iw >= i32(p.in_w)) {
        return 0.0;
    }
    return ld_f32(base + u32(ih) * p.in_w + u32(iw));
}

// The conv at output (oh, ow) of image n, channel co, summed directly: channels in order, each
// channel's 9 taps row by row (written out: one loop iteration per channel, so a tile's m * m sums
// stay within the loop budget conv_winograd.py checks).
fn direct(n: u32, co: u32, oh: u32, ow: u32) -> f32 {
    let h = i32(oh) - p.p_h;
    let w = i32(ow) - p.p_w;
    var acc = 0.0;
    for (var ci = 0u; ci < p.c_in; ci = ci + 1u) {
        let base = p.x + (n * p.c_in + ci) * p.in_h * p.in_w;
        let wb = p.w + (co * p.c_in + ci) * 9u;
        acc = acc + x_tap(base, h, w) * ld_f32(wb);
        acc = acc + x_tap(base, h, w + 1) * ld_f32(wb + 1u);
        acc = acc + x_tap(base, h, w + 2) * ld_f32(wb + 2u);
        acc = acc + x_tap(base, h + 1, w) * ld_f32(wb + 3u);
        acc = acc + x_tap(base, h + 1, w + 1) * ld_f32(wb + 4u);
        acc = acc + x_tap(base, h + 1, w + 2) * ld_f32(wb + 5u);
        acc = acc + x_tap(base, h + 2, w) * ld_f32(wb + 6u);
        acc = acc + x_tap(base, h + 2, w + 1) * ld_f32(wb + 7u);
        acc = acc + x_tap(base, h + 2, w + 2) * ld_f32(wb + 8u);
    }
    return acc;
}

// Output (oh, ow) of image n, channel co from its conv sum; nothing past the output's edge (a tile at
// an edge not a multiple of m is partly empty).
fn store_y(n: u32, co: u32, oh: u32, ow: u32, value: f32) {
    if (oh >= p.out_h || ow >= p.out_w) {
        return;
    }
    let index = ((n * p.c_out + co) * p.out_h + oh) * p.out_w + ow;
    st_f32(p.y + index, finish(co, index, value));
}

// The tile's m x m outputs summed directly (one call site: the direct sum is not inlined per output).
fn store_direct(n: u32, co: u32, oh: u32, ow: u32) {
    for (var t = 0u; t < TILE * TILE; t = t + 1u) {
        store_y(n, co, oh + t / TILE, ow + t % TILE, direct(n, co, oh + t / TILE, ow + t % TILE));
    }
}

fn run_item(i: u32) {
    let col = i % p.cols;
    let co = i / p.cols;
    if (i >= p.total || col >= p.tiles) {
        return;
    }
    let plane = p.c_out * p.cols;
    let first = p.mt + i;
    let per_image = p.tiles_h * p.tiles_w;
    let img = col / per_image;
    let oh = TILE * ((col % per_image) / p.tiles_w);
    let ow = TILE * (col % p.tiles_w);
{{TRANSFORM}}
}

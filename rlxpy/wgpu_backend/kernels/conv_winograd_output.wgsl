// Winograd F(2x2, 3x3), output transform: the 2x2 outputs of tile col = (n, th, tw) for channel co are
// A^T M A of the 16 GEMM results M[t][co][col], A^T = [[1, 1, 1, 0], [0, 1, -1, -1]], then bias and
// activation (conv_epilogue's finish). A tile whose M holds a NaN or inf is recomputed directly
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

fn run_item(i: u32) {
    let col = i % p.cols;
    let co = i / p.cols;
    if (i >= p.total || col >= p.tiles) {
        return;
    }
    let plane = p.c_out * p.cols;
    var m: array<vec4<f32>, 4>;
    var ok = true;
    for (var r = 0u; r < 4u; r = r + 1u) {
        for (var c = 0u; c < 4u; c = c + 1u) {
            let value = ld_f32(p.mt + (r * 4u + c) * plane + i);
            m[r][c] = value;
            ok = ok && finite(value);
        }
    }
    // A^T over the rows, then over the columns of each of the two rows
    let y0 = at(vec4<f32>(m[0].x + m[1].x + m[2].x, m[0].y + m[1].y + m[2].y, m[0].z + m[1].z + m[2].z,
                          m[0].w + m[1].w + m[2].w));
    let y1 = at(m[1] - m[2] - m[3]);
    let per_image = p.tiles_h * p.tiles_w;
    let n = col / per_image;
    let oh = 2u * ((col % per_image) / p.tiles_w);
    let ow = 2u * (col % p.tiles_w);
    var out = array<vec2<f32>, 2>(y0, y1);
    for (var r = 0u; r < 2u; r = r + 1u) {
        for (var c = 0u; c < 2u; c = c + 1u) {
            if (oh + r < p.out_h && ow + c < p.out_w) {
                var acc = out[r][c];
                if (!ok) {
                    acc = direct(n, co, oh + r, ow + c);
                }
                st_f32(p.y + ((n * p.c_out + co) * p.out_h + oh + r) * p.out_w + ow + c, finish(co, acc));
            }
        }
    }
}

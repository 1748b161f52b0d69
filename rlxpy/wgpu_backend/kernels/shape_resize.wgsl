// Resize of the trailing dims of x: y[o, j0, j1, j2] samples x[o, ...] at the source coordinates of
// j0, j1, j2 (ResizeCoord in p.coord, ResizeMode in p.mode). Three resized dims
// always: a graph resizing k < 3 dims pads the front with in = out = 1 dims that are not sampled
// (p.first = 3 - k is the first real one). Coordinates in f32 as the reference; linear multiplies every
// neighbour by its weight (a NaN, or an inf at weight 0, gives NaN, as torch).
// One invocation per output element. Bindings: 0 = arena window (u32 words), 1 = ShapeResizeParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"
#include "common_float.wgsl"

fn size_in(d: u32) -> u32 {
    return select(select(p.in2, p.in1, d == 1u), p.in0, d == 0u);
}
fn size_out(d: u32) -> u32 {
    return select(select(p.out2, p.out1, d == 1u), p.out0, d == 0u);
}
fn step_of(d: u32) -> f32 {
    return select(select(p.step2, p.step1, d == 1u), p.step0, d == 0u);
}

// ResizeCoord: 0 asymmetric and 3 align_corners (its step is (in - 1) / (out - 1)) are o * step;
// 1 half_pixel; 2 pytorch_half_pixel (0 for a single output).
fn source(o: u32, d: u32) -> f32 {
    let step = step_of(d);
    if (p.coord == 0u || p.coord == 3u) {
        return f32(o) * step;
    }
    if (p.coord == 2u && size_out(d) == 1u) {
        return 0.0;
    }
    return (f32(o) + 0.5) * step - 0.5;
}

// ResizeMode 0-3: floor, ceil, round half down, round half up; clamped into [0, in - 1].
fn nearest(src: f32, d: u32) -> u32 {
    var r = floor(src);
    if (p.mode == 1u) {
        r = ceil(src);
    } else if (p.mode == 2u) {
        r = ceil(src - 0.5);
    } else if (p.mode == 3u) {
        r = floor(src + 0.5);
    }
    return u32(clamp(sat_i32(r), 0, i32(size_in(d)) - 1));
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    var rest = i;
    var j: array<u32, 3>;
    for (var d = 2; d >= 0; d = d - 1) {
        let size = size_out(u32(d));
        j[d] = rest % size;
        rest = rest / size;
    }
    let base = rest * p.in0 * p.in1 * p.in2;
    // per dim: first neighbour, second neighbour and the second's weight (linear)
    var lo: array<u32, 3>;
    var hi: array<u32, 3>;
    var frac: array<f32, 3>;
    for (var d = 0u; d < 3u; d = d + 1u) {
        lo[d] = 0u;
        hi[d] = 0u;
        frac[d] = 0.0;
        if (d >= p.first) {
            let src = source(j[d], d);
            if (p.mode == 4u) {
                let s = max(src, 0.0);
                lo[d] = min(sat_u32(floor(s)), size_in(d) - 1u);
                hi[d] = min(lo[d] + 1u, size_in(d) - 1u);
                frac[d] = min(s - f32(lo[d]), 1.0);
            } else {
                lo[d] = nearest(src, d);
            }
        }
    }
    if (p.mode != 4u) {
        st_f32(p.y + i, ld_f32(p.x + base + (lo[0] * p.in1 + lo[1]) * p.in2 + lo[2]));
        return;
    }
    var total = 0.0;
    for (var corner = 0u; corner < 8u; corner = corner + 1u) {
        var weight = 1.0;
        var at: array<u32, 3>;
        var used = true;
        for (var d = 0u; d < 3u; d = d + 1u) {
            let second = ((corner >> (2u - d)) & 1u) == 1u;
            if (d < p.first) {
                used = used && !second;  // a padding dim has one tap, not weighted
                at[d] = 0u;
            } else {
                at[d] = select(lo[d], hi[d], second);
                weight = weight * select(1.0 - frac[d], frac[d], second);
            }
        }
        if (used) {
            total = total + weight * ld_f32(p.x + base + (at[0] * p.in1 + at[1]) * p.in2 + at[2]);
        }
    }
    st_f32(p.y + i, total);
}

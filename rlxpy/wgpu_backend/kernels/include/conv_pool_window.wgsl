// The window of one pool output along each axis, as (start, step, count): taps start + t*step for
// t < count. Pool: start = o*s - pad, step = dilation, count = kernel; AdaptivePool (adaptive = 1):
// bin o of `out` over `size` elements, [floor(o*size/out), ceil((o+1)*size/out)), step 1.
// inside(win, lo, hi) is the range [first, last) of t whose tap lies in [lo, hi); the mean's divisor
// counts taps inside [lo_*, hi_*) (the padded input or the input) unless `divisor` > 0 overrides it.
// combine(a, b) is {{COMBINE}} (max/min propagate NaN), its identity {{IDENTITY}}.
#include "common_float.wgsl"

fn combine(a: f32, b: f32) -> f32 {
    return {{COMBINE}};
}
fn floor_div(a: i32, b: i32) -> i32 {  // b > 0; WGSL's / truncates toward zero
    let q = a / b;
    return select(q, q - 1, a % b != 0 && a < 0);
}
fn ceil_div(a: i32, b: i32) -> i32 {
    return -floor_div(-a, b);
}
fn axis_window(o: u32, size: u32, out: u32, k: u32, s: u32, pad: i32, dil: u32) -> vec3<i32> {
    if (p.adaptive == 1u) {
        let start = (o * size) / out;
        let end = ((o + 1u) * size + out - 1u) / out;
        return vec3<i32>(i32(start), 1, i32(end - start));
    }
    return vec3<i32>(i32(o * s) - pad, i32(dil), i32(k));
}
fn inside(win: vec3<i32>, lo: i32, hi: i32) -> vec2<i32> {
    let first = max(0, ceil_div(lo - win.x, win.y));
    let last = min(win.z, ceil_div(hi - win.x, win.y));
    return vec2<i32>(first, max(first, last));
}
fn taps_in(win: vec3<i32>, lo: i32, hi: i32) -> f32 {
    let r = inside(win, lo, hi);
    return f32(r.y - r.x);
}
fn pool_divisor(wd: vec3<i32>, wh: vec3<i32>, ww: vec3<i32>) -> f32 {
    if (p.divisor > 0.0) {
        return p.divisor;
    }
    return taps_in(wd, p.lo_d, p.hi_d) * taps_in(wh, p.lo_h, p.hi_h) * taps_in(ww, p.lo_w, p.hi_w);
}
// x[row, id, ih, iw] (row = n * C + c) for taps known to be inside the input
fn pool_load(row: u32, id: i32, ih: i32, iw: i32) -> f32 {
    return ld_f32(p.x + ((row * p.in_d + u32(id)) * p.in_h + u32(ih)) * p.in_w + u32(iw));
}
// Output i = row * positions + pos of y[row, od, oh, ow]: its row and, per axis, the window and the range
// of its taps that lie inside the input
struct PoolOutput {
    row: u32,
    wd: vec3<i32>,
    wh: vec3<i32>,
    ww: vec3<i32>,
    rd: vec2<i32>,
    rh: vec2<i32>,
    rw: vec2<i32>,
}
fn pool_output(i: u32) -> PoolOutput {
    let pos = i % p.positions;
    let row = i / p.positions;
    let ow = pos % p.out_w;
    let oh = (pos / p.out_w) % p.out_h;
    let od = pos / (p.out_w * p.out_h);
    let wd = axis_window(od, p.in_d, p.out_d, p.k_d, p.s_d, p.p_d, p.dl_d);
    let wh = axis_window(oh, p.in_h, p.out_h, p.k_h, p.s_h, p.p_h, p.dl_h);
    let ww = axis_window(ow, p.in_w, p.out_w, p.k_w, p.s_w, p.p_w, p.dl_w);
    return PoolOutput(row, wd, wh, ww, inside(wd, 0, i32(p.in_d)), inside(wh, 0, i32(p.in_h)),
                      inside(ww, 0, i32(p.in_w)));
}

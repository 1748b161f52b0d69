// Pool / AdaptivePool with small windows: one invocation per output y[row, od, oh, ow] (row = n*C + c)
// folds the window's taps that lie inside the input (the others are the identity), then divides a
// mean. A windowed pool walks its k_d x k_h x k_w taps from the window's corner and skips those outside
// (one index decode per output; the bounds per axis cost integer divisions the GPU does slowly);
// an adaptive one walks each axis's in-input range (pool_output). Both fold in the same order.
// Bindings: 0 = arena window (u32 words), 1 = ConvPoolParams (3-D geometry).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_pool_window.wgsl"
#include "common_entry_items.wgsl"

fn adaptive_fold(i: u32) -> f32 {
    let o = pool_output(i);
    var acc: f32 = {{IDENTITY}};
    for (var td = o.rd.x; td < o.rd.y; td = td + 1) {
        for (var th = o.rh.x; th < o.rh.y; th = th + 1) {
            for (var tw = o.rw.x; tw < o.rw.y; tw = tw + 1) {
                acc = combine(acc, pool_load(o.row, o.wd.x + td * o.wd.y, o.wh.x + th * o.wh.y, o.ww.x + tw * o.ww.y));
            }
        }
    }
    return acc;
}

fn window_fold(i: u32) -> f32 {
    let ow = i % p.out_w;
    let rest = i / p.out_w;
    let oh = rest % p.out_h;
    let rest2 = rest / p.out_h;
    let od = rest2 % p.out_d;
    let row = rest2 / p.out_d;
    let d0 = i32(od * p.s_d) - p.p_d;
    let h0 = i32(oh * p.s_h) - p.p_h;
    let w0 = i32(ow * p.s_w) - p.p_w;
    var acc: f32 = {{IDENTITY}};
    for (var td = 0u; td < p.k_d; td = td + 1u) {
        let id = d0 + i32(td * p.dl_d);
        if (id < 0 || id >= i32(p.in_d)) {
            continue;
        }
        for (var th = 0u; th < p.k_h; th = th + 1u) {
            let ih = h0 + i32(th * p.dl_h);
            if (ih < 0 || ih >= i32(p.in_h)) {
                continue;
            }
            for (var tw = 0u; tw < p.k_w; tw = tw + 1u) {
                let iw = w0 + i32(tw * p.dl_w);
                if (iw >= 0 && iw < i32(p.in_w)) {
                    acc = combine(acc, pool_load(row, id, ih, iw));
                }
            }
        }
    }
    return acc;
}

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    var acc: f32;
    if (p.adaptive == 1u) {
        acc = adaptive_fold(i);
    } else {
        acc = window_fold(i);
    }
    if (p.mean == 1u) {
        let o = pool_output(i);
        acc = acc / pool_divisor(o.wd, o.wh, o.ww);
    }
    st_f32(p.y + i, acc);
}

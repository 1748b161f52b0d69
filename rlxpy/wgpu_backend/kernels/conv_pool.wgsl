// Pool / AdaptivePool with small windows: one invocation per output y[row, od, oh, ow] (row = n*C + c)
// folds the window's taps that lie inside the input (the others are the identity), then divides a
// mean. Bindings: 0 = arena window (u32 words), 1 = ConvPoolParams (3-D geometry).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_pool_window.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let pos = i % p.positions;
    let row = i / p.positions;
    let ow = pos % p.out_w;
    let oh = (pos / p.out_w) % p.out_h;
    let od = pos / (p.out_w * p.out_h);
    let wd = axis_window(od, p.in_d, p.out_d, p.k_d, p.s_d, p.p_d, p.dl_d);
    let wh = axis_window(oh, p.in_h, p.out_h, p.k_h, p.s_h, p.p_h, p.dl_h);
    let ww = axis_window(ow, p.in_w, p.out_w, p.k_w, p.s_w, p.p_w, p.dl_w);
    let rd = inside(wd, 0, i32(p.in_d));
    let rh = inside(wh, 0, i32(p.in_h));
    let rw = inside(ww, 0, i32(p.in_w));
    var acc: f32 = {{IDENTITY}};
    for (var td = rd.x; td < rd.y; td = td + 1) {
        for (var th = rh.x; th < rh.y; th = th + 1) {
            for (var tw = rw.x; tw < rw.y; tw = tw + 1) {
                acc = combine(acc, pool_load(row, wd.x + td * wd.y, wh.x + th * wh.y, ww.x + tw * ww.y));
            }
        }
    }
    if (p.mean == 1u) {
        acc = acc / pool_divisor(wd, wh, ww);
    }
    st_f32(p.y + i, acc);
}

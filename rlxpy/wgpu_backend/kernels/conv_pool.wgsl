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
    let o = pool_output(i);
    var acc: f32 = {{IDENTITY}};
    for (var td = o.rd.x; td < o.rd.y; td = td + 1) {
        for (var th = o.rh.x; th < o.rh.y; th = th + 1) {
            for (var tw = o.rw.x; tw < o.rw.y; tw = tw + 1) {
                acc = combine(acc, pool_load(o.row, o.wd.x + td * o.wd.y, o.wh.x + th * o.wh.y, o.ww.x + tw * o.ww.y));
            }
        }
    }
    if (p.mean == 1u) {
        acc = acc / pool_divisor(o.wd, o.wh, o.ww);
    }
    st_f32(p.y + i, acc);
}

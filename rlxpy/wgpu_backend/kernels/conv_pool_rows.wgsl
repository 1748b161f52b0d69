// Pool / AdaptivePool with large windows (global pooling): one workgroup of {{WG}} lanes per output;
// lane l folds the in-input taps l, l + {{WG}}, ... of the flattened window, then a workgroup-memory
// tree combines the lanes and lane 0 divides a mean. Bindings: 0 = arena window (u32 words),
// 1 = ConvPoolParams (3-D geometry).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_pool_window.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_partial.wgsl"

fn run_row(i: u32, lane: u32) {
    if (i >= p.total) {
        return;
    }
    let o = pool_output(i);
    let nh = u32(o.rh.y - o.rh.x);
    let nw = u32(o.rw.y - o.rw.x);
    let taps = u32(o.rd.y - o.rd.x) * nh * nw;
    var acc: f32 = {{IDENTITY}};
    for (var t = lane; t < taps; t = t + {{WG}}u) {
        let td = o.rd.x + i32(t / (nh * nw));
        let th = o.rh.x + i32((t / nw) % nh);
        let tw = o.rw.x + i32(t % nw);
        acc = combine(acc, pool_load(o.row, o.wd.x + td * o.wd.y, o.wh.x + th * o.wh.y, o.ww.x + tw * o.ww.y));
    }
    partial[lane] = acc;
    tree_reduce(lane, 0u);
    if (lane == 0u) {
        var total = partial[0];
        if (p.mean == 1u) {
            total = total / pool_divisor(o.wd, o.wh, o.ww);
        }
        st_f32(p.y + i, total);
    }
}

// Pool / AdaptivePool with large windows (global pooling): one workgroup of {{WG}} lanes per output;
// lane l folds the in-input taps l, l + {{WG}}, ... of the flattened window, then a workgroup-memory
// tree combines the lanes and lane 0 divides a mean. Bindings: 0 = arena window (u32 words),
// 1 = ConvPoolParams (3-D geometry).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_pool_window.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> partial: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    partial[a] = combine(partial[a], partial[b]);
}

fn run_row(i: u32, lane: u32) {
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
    let nh = u32(rh.y - rh.x);
    let nw = u32(rw.y - rw.x);
    let taps = u32(rd.y - rd.x) * nh * nw;
    var acc: f32 = {{IDENTITY}};
    for (var t = lane; t < taps; t = t + {{WG}}u) {
        let td = rd.x + i32(t / (nh * nw));
        let th = rh.x + i32((t / nw) % nh);
        let tw = rw.x + i32(t % nw);
        acc = combine(acc, pool_load(row, wd.x + td * wd.y, wh.x + th * wh.y, ww.x + tw * ww.y));
    }
    partial[lane] = acc;
    tree_reduce(lane, 0u);
    if (lane == 0u) {
        var total = partial[0];
        if (p.mean == 1u) {
            total = total / pool_divisor(wd, wh, ww);
        }
        st_f32(p.y + i, total);
    }
}

// The online softmax statistics of one line over a workgroup of {{WG}} lanes (norm_softmax_rows,
// loss_rows, backward_cross_entropy): lane l folds x[base + c * stride] for c = l, l + WG, ... < cols
// with online_add, then the common_workgroup_tree merges the lanes' (max, sum); every lane gets the
// line's (max, sum).
#include "norm_softmax_online.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> part_max: array<f32, {{WG}}>;
var<workgroup> part_sum: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    let merged = maxp(part_max[a], part_max[b]);
    part_sum[a] = part_sum[a] * exp_shift(part_max[a], merged) + part_sum[b] * exp_shift(part_max[b], merged);
    part_max[a] = merged;
}

fn line_max_sum(lane: u32, base: u32, stride: u32, cols: u32) -> vec2<f32> {
    var ms = vec2<f32>(-inf_f32(), 0.0);
    for (var c = lane; c < cols; c = c + {{WG}}u) {
        ms = online_add(ms, ld_f32(p.x + base + c * stride));
    }
    part_max[lane] = ms.x;
    part_sum[lane] = ms.y;
    tree_reduce(lane, 0u);
    return vec2<f32>(part_max[0], part_sum[0]);
}

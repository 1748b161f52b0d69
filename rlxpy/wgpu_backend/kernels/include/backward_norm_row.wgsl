// A row of LayerNorm [center=1] / RmsNorm [center=0] over a workgroup of {{WG}} lanes
// (backward_norm_stats, backward_norm_rows): lane l takes columns l, l + WG, ... of the row at base.
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> partial: array<vec2<f32>, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    partial[a] = partial[a] + partial[b];
}

// both lanes' sums over the workgroup
fn workgroup_sum2(lane: u32, value: vec2<f32>) -> vec2<f32> {
    partial[lane] = value;
    tree_reduce(lane, 0u);
    let total = partial[0];
    workgroupBarrier();  // every lane has read the total before partial is reused
    return total;
}

fn workgroup_sum(lane: u32, value: f32) -> f32 {
    return workgroup_sum2(lane, vec2<f32>(value, 0.0)).x;
}

// the row's mean of x for LayerNorm, 0 for RmsNorm, in every lane
fn row_mean(lane: u32, base: u32) -> f32 {
    if (p.center != 1u) {
        return 0.0;
    }
    var part = 0.0;
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        part = part + ld_f32(p.x + base + c);
    }
    return workgroup_sum(lane, part) / f32(p.cols);
}

// A sum over the {{WG}} lanes of a row's workgroup (norm_rows, norm_groups): workgroup_sum(lane, value)
// folds every lane's value with the common_workgroup_tree and hands the total to every lane.
#include "common_workgroup_tree.wgsl"

var<workgroup> partial: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    partial[a] = partial[a] + partial[b];
}

fn workgroup_sum(lane: u32, value: f32) -> f32 {
    partial[lane] = value;
    tree_reduce(lane, 0u);
    let total = partial[0];
    workgroupBarrier();  // every lane has read the total before partial is reused
    return total;
}

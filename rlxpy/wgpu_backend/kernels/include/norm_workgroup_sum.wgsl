// A sum over the {{WG}} lanes of a row's workgroup (norm_rows, norm_groups): workgroup_sum(lane, value)
// folds every lane's value with common_workgroup_partial and hands the total to every lane.
#include "common_workgroup_partial.wgsl"

fn combine(a: f32, b: f32) -> f32 {
    return a + b;
}

fn workgroup_sum(lane: u32, value: f32) -> f32 {
    partial[lane] = value;
    tree_reduce(lane, 0u);
    let total = partial[0];
    workgroupBarrier();  // every lane has read the total before partial is reused
    return total;
}

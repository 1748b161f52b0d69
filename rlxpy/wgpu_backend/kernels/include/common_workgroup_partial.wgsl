// One f32 slot per lane of a workgroup of {{WG}} lanes (reduce_tree, conv_pool_rows, norm_workgroup_sum),
// folded by common_workgroup_tree with the kernel's combine(a, b): after tree_reduce, partial[0] holds
// the fold of every lane's slot.
#include "common_workgroup_tree.wgsl"

var<workgroup> partial: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    partial[a] = combine(partial[a], partial[b]);
}

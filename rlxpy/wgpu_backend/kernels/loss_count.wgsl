// y = the number of targets in [0, C) (C = p.cols), as f32: one workgroup of {{WG}} lanes, each counting a
// strided share of the rows, then a tree sum. Bindings: 0 = arena window (u32 words), 1 = LossCountParams
// (targets read as {{TARGET}}).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "loss_targets.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> counts: array<u32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    counts[a] = counts[a] + counts[b];
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32) {
    var count = 0u;
    for (var row = lane; row < p.rows; row = row + {{WG}}u) {
        count = count + select(0u, 1u, target_of(row) < p.cols);
    }
    counts[lane] = count;
    tree_reduce(lane, 0u);
    if (lane == 0u) {
        st_f32(p.y, f32(counts[0]));
    }
}

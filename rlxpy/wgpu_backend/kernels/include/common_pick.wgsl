// One round of picking the best candidate over the {{WG}} lanes of a workgroup (reduce_topk, custom_knn,
// signal_welch_topk):
// lane l writes its candidate to pick_value[l], pick_index[l] (index NONE: no candidate) and the
// common_workgroup_tree, whose tree_merge calls pick_merge, leaves the best in slot 0. The kernel's
// pick_order(v1, i1, v2, i2) says whether candidate (v1, i1) ranks before (v2, i2); NONE ranks last.
#include "common_workgroup_tree.wgsl"

const NONE: u32 = 0xffffffffu;

var<workgroup> pick_value: array<f32, {{WG}}>;
var<workgroup> pick_index: array<u32, {{WG}}>;

fn beats(v1: f32, i1: u32, v2: f32, i2: u32) -> bool {
    if (i1 == NONE) {
        return false;
    }
    if (i2 == NONE) {
        return true;
    }
    return pick_order(v1, i1, v2, i2);
}

// slot b's candidate into slot a where it ranks before a's; true where it moved
fn pick_merge(a: u32, b: u32) -> bool {
    let moved = beats(pick_value[b], pick_index[b], pick_value[a], pick_index[a]);
    if (moved) {
        pick_value[a] = pick_value[b];
        pick_index[a] = pick_index[b];
    }
    return moved;
}

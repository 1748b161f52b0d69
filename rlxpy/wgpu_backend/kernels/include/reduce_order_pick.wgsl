// The workgroup pick of include/common_pick in the order of include/reduce_order (NaN largest, ties ->
// smaller index), merged by the common_workgroup_tree: reduce_topk, signal_welch_topk.
#include "reduce_order.wgsl"
#include "common_pick.wgsl"

fn pick_order(v1: f32, i1: u32, v2: f32, i2: u32) -> bool {
    return ranks_before(v1, i1, v2, i2);
}

fn tree_merge(tree: u32, a: u32, b: u32) {
    _ = pick_merge(a, b);
}

// One round over the count f32 values at base (lane l scans l, l + {{WG}}, ...): the best value ranked
// after the last pick (*last_value, *last_index) (any, where *last_index is NONE) becomes the last pick
// in every lane (index NONE: none left). Call from uniform control flow.
fn pick_after(base: u32, count: u32, lane: u32, last_value: ptr<function, f32>, last_index: ptr<function, u32>) {
    let previous_value = *last_value;
    let previous_index = *last_index;
    var value: f32 = 0.0;
    var index: u32 = NONE;
    // four strides at a time, their loads issued before the first comparison (a load per step made a
    // long row latency-bound: 49152 logits took ~50 us on an H100); the same order of comparisons
    var c = lane;
    for (; c + 3u * {{WG}}u < count; c = c + 4u * {{WG}}u) {
        var vs = vec4<f32>(ld_f32(base + c), ld_f32(base + c + {{WG}}u), ld_f32(base + c + 2u * {{WG}}u),
                           ld_f32(base + c + 3u * {{WG}}u));
        for (var u = 0u; u < 4u; u = u + 1u) {
            let cu = c + u * {{WG}}u;
            let eligible = previous_index == NONE || beats(previous_value, previous_index, vs[u], cu);
            if (eligible && beats(vs[u], cu, value, index)) {
                value = vs[u];
                index = cu;
            }
        }
    }
    for (; c < count; c = c + {{WG}}u) {
        let v = ld_f32(base + c);
        let eligible = previous_index == NONE || beats(previous_value, previous_index, v, c);
        if (eligible && beats(v, c, value, index)) {
            value = v;
            index = c;
        }
    }
    pick_value[lane] = value;
    pick_index[lane] = index;
    tree_reduce(lane, 0u);
    *last_value = pick_value[0];
    *last_index = pick_index[0];
    workgroupBarrier();  // every lane has read the pick before the next round writes its slot
}

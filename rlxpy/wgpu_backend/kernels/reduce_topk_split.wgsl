// Argmax (TopK with k = 1) of long rows in two dispatches (the order of reduce_order: NaN largest, ties ->
// smaller index). MERGE false: workgroup (part, row) picks the best of its 4 x {{WG}} values (one round
// of pick_after: every lane's four loads issued together) into record [value, index] of (row, part);
// MERGE true: one workgroup per row picks the best of the row's records and writes its index. One long
// scan of a row by one workgroup is a chain of load round trips; the parts run side by side.
// Bindings: 0 = arena window, 1 = ReduceTopkSplitParams (part = the records, 2 words each).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "reduce_order_pick.wgsl"

const MERGE: bool = {{MERGE}};
const CHUNK: u32 = 4u * {{WG}}u;  // values per part

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y;
    if (row >= p.rows) {
        return;  // the whole workgroup: barriers stay in uniform control flow
    }
    var value: f32 = 0.0;
    var index: u32 = NONE;
    if (!MERGE) {
        let c0 = wid.x * CHUNK;
        pick_after(p.x + row * p.cols + c0, min(CHUNK, p.cols - c0), lane, &value, &index);
        if (lane == 0u) {
            let rec = p.part + 2u * (row * p.parts + wid.x);
            st_f32(rec, value);
            st_u32(rec + 1u, index + c0);
        }
        return;
    }
    for (var j = lane; j < p.parts; j = j + {{WG}}u) {
        let rec = p.part + 2u * (row * p.parts + j);
        let v = ld_f32(rec);
        let i = ld_u32(rec + 1u);
        if (beats(v, i, value, index)) {
            value = v;
            index = i;
        }
    }
    pick_value[lane] = value;
    pick_index[lane] = index;
    tree_reduce(lane, 0u);
    if (lane == 0u) {
        st_i32(p.y + row, i32(pick_index[0]));
    }
}

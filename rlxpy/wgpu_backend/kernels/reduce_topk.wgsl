// y[row, j] = index of the j-th largest x[row, :], j < k (NaN largest, ties -> smaller index); Argmax: k=1.
// One workgroup of {{WG}} lanes per row, k rounds: each picks the best element ranked after the last pick
// (strided scan + workgroup tree). Bindings: 0 = arena window, 1 = ReduceTopkParams (rounds of one dispatch).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ReduceTopkParams;

{{PRELUDE}}

const NONE: u32 = 0xffffffffu;

var<workgroup> best_value: array<f32, {{WG}}>;
var<workgroup> best_index: array<u32, {{WG}}>;

#include "reduce_order.wgsl"

// ranks_before, with NONE (no element) last
fn beats(v1: f32, i1: u32, v2: f32, i2: u32) -> bool {
    if (i1 == NONE) {
        return false;
    }
    if (i2 == NONE) {
        return true;
    }
    return ranks_before(v1, i1, v2, i2);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.rows) {
        return;
    }
    let lane = lid.x;
    let base = p.x + row * p.cols;
    var previous_value: f32 = 0.0;
    var previous_index: u32 = NONE;
    if (p.round_start > 0u) {  // rounds split over dispatches: resume after the last pick written
        previous_index = u32(ld_i32(p.y + row * p.k + p.round_start - 1u));
        previous_value = ld_f32(base + previous_index);
    }
    for (var round = p.round_start; round < p.round_start + p.round_count; round = round + 1u) {
        var value: f32 = 0.0;
        var index: u32 = NONE;
        for (var c = lane; c < p.cols; c = c + {{WG}}u) {
            let v = ld_f32(base + c);
            let eligible = previous_index == NONE || beats(previous_value, previous_index, v, c);
            if (eligible && beats(v, c, value, index)) {
                value = v;
                index = c;
            }
        }
        best_value[lane] = value;
        best_index[lane] = index;
        workgroupBarrier();
        for (var stride = {{WG}}u / 2u; stride > 0u; stride = stride / 2u) {
            if (lane < stride && beats(best_value[lane + stride], best_index[lane + stride],
                                       best_value[lane], best_index[lane])) {
                best_value[lane] = best_value[lane + stride];
                best_index[lane] = best_index[lane + stride];
            }
            workgroupBarrier();
        }
        previous_value = best_value[0];
        previous_index = best_index[0];
        if (lane == 0u) {
            st_i32(p.y + row * p.k + round, i32(previous_index));
        }
        workgroupBarrier();
    }
}

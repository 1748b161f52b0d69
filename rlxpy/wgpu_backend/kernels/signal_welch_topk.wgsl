// WelchPeaks' ranking: y[b] = (bin, power) of the k largest psd[b, :] (NaN largest, ties -> lower bin),
// interleaved. One workgroup of {{WG}} lanes per batch row, k rounds: each picks the best bin ranked
// after the last pick (strided scan + workgroup tree); rounds split over dispatches resume from the last
// pick written. Bindings: 0 = arena window (u32 words), 1 = SignalWelchTopkParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "reduce_order.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

const NONE: u32 = 0xffffffffu;

var<workgroup> best_value: array<f32, {{WG}}>;
var<workgroup> best_index: array<u32, {{WG}}>;

// ranks_before, with NONE (no bin) last
fn beats(v1: f32, i1: u32, v2: f32, i2: u32) -> bool {
    if (i1 == NONE) {
        return false;
    }
    if (i2 == NONE) {
        return true;
    }
    return ranks_before(v1, i1, v2, i2);
}

fn tree_merge(tree: u32, a: u32, b: u32) {
    if (beats(best_value[b], best_index[b], best_value[a], best_index[a])) {
        best_value[a] = best_value[b];
        best_index[a] = best_index[b];
    }
}

fn run_row(row: u32, lane: u32) {
    if (row >= p.batch) {
        return;
    }
    let base = p.psd + row * p.bins;
    let out = p.y + row * 2u * p.k;
    var previous_value: f32 = 0.0;
    var previous_index: u32 = NONE;
    if (p.round_start > 0u) {  // bins are exact in f32 (< 2^24)
        previous_index = u32(ld_f32(out + 2u * (p.round_start - 1u)));
        previous_value = ld_f32(base + previous_index);
    }
    for (var round = p.round_start; round < p.round_start + p.round_count; round = round + 1u) {
        var value: f32 = 0.0;
        var index: u32 = NONE;
        for (var c = lane; c < p.bins; c = c + {{WG}}u) {
            let v = ld_f32(base + c);
            let eligible = previous_index == NONE || beats(previous_value, previous_index, v, c);
            if (eligible && beats(v, c, value, index)) {
                value = v;
                index = c;
            }
        }
        best_value[lane] = value;
        best_index[lane] = index;
        tree_reduce(lane, 0u);
        previous_value = best_value[0];
        previous_index = best_index[0];
        if (lane == 0u) {
            st_f32(out + 2u * round, f32(previous_index));
            st_f32(out + 2u * round + 1u, previous_value);
        }
        workgroupBarrier();
    }
}

// y[row, j] = index of the j-th largest x[row, :], j < k (NaN largest, ties -> smaller index); Argmax: k=1.
// One workgroup of {{WG}} lanes per row, k rounds: each picks the best element ranked after the last pick
// (strided scan + workgroup tree). Bindings: 0 = arena window, 1 = ReduceTopkParams (rounds of one dispatch).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "reduce_order_pick.wgsl"

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = p.x + row * p.cols;
    var previous_value: f32 = 0.0;
    var previous_index: u32 = NONE;
    if (p.round_start > 0u) {  // rounds split over dispatches: resume after the last pick written
        previous_index = u32(ld_i32(p.y + row * p.k + p.round_start - 1u));
        previous_value = ld_f32(base + previous_index);
    }
    for (var round = p.round_start; round < p.round_start + p.round_count; round = round + 1u) {
        pick_after(base, p.cols, lane, &previous_value, &previous_index);
        if (lane == 0u) {
            st_i32(p.y + row * p.k + round, i32(previous_index));
        }
    }
}

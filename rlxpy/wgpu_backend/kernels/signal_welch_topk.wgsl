// WelchPeaks' ranking: y[b] = (bin, power) of the k largest psd[b, :] (NaN largest, ties -> lower bin),
// interleaved. One workgroup of {{WG}} lanes per batch row, k rounds: each picks the best bin ranked
// after the last pick (strided scan + workgroup tree); rounds split over dispatches resume from the last
// pick written. Bindings: 0 = arena window (u32 words), 1 = SignalWelchTopkParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "reduce_order_pick.wgsl"

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
        pick_after(base, p.bins, lane, &previous_value, &previous_index);
        if (lane == 0u) {
            st_f32(out + 2u * round, f32(previous_index));
            st_f32(out + 2u * round + 1u, previous_value);
        }
    }
}

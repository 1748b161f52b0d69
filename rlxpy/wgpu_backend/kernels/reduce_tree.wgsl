// y[row] = reduce_r x[row, r] (sum/mean/max/min/prod) over contiguous rows longer than 64 (inner == 1).
// One workgroup of {{WG}} lanes per row: lane l folds r = l, l + {{WG}}, ...; then a workgroup-memory tree.
// Bindings: 0 = arena window, 1 = ReduceTreeParams (r in [start, start + count); accumulate folds in y).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "reduce_combine.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_partial.wgsl"

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = p.x + row * p.reduce_dim + p.start;
    var acc: f32 = {{IDENTITY}};
    for (var r = lane; r < p.count; r = r + {{WG}}u) {
        acc = combine(acc, ld_f32(base + r));
    }
    partial[lane] = acc;
    tree_reduce(lane, 0u);
    if (lane == 0u) {
        // a long row is split over several dispatches: later chunks fold into the partial result in y;
        // the divisor (n for mean, else 1) is applied by the last chunk only
        var total = partial[0];
        if (p.accumulate == 1u) {
            total = combine(ld_f32(p.y + row), total);
        }
        st_f32(p.y + row, total / p.divisor);
    }
}

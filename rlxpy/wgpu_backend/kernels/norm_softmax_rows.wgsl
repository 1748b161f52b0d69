// y[row, c] = exp(x[row, c] - m) / sum_j exp(x[row, j] - m), m = max_j x[row, j]: softmax of contiguous rows.
// One workgroup of {{WG}} lanes per row: pass 1 online (max, sum) per lane + tree merge, pass 2 writes.
// Bindings: 0 = arena window (u32 words), 1 = NormSoftmaxRowsParams (element offsets in the window).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "norm_softmax_online.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> part_max: array<f32, {{WG}}>;
var<workgroup> part_sum: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    let merged = maxp(part_max[a], part_max[b]);
    part_sum[a] = part_sum[a] * exp_shift(part_max[a], merged) + part_sum[b] * exp_shift(part_max[b], merged);
    part_max[a] = merged;
}

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    var ms = vec2<f32>(-inf_f32(), 0.0);
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        ms = online_add(ms, ld_f32(p.x + base + c));
    }
    part_max[lane] = ms.x;
    part_sum[lane] = ms.y;
    tree_reduce(lane, 0u);
    let row_max = part_max[0];
    let row_sum = part_sum[0];
    // a NaN max (NaN in the row) or an all -inf row gives NaN everywhere, like torch.softmax
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        st_f32(p.y + base + c, exp_shift(ld_f32(p.x + base + c), row_max) / row_sum);
    }
}

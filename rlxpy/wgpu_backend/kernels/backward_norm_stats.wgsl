// Per-row statistics of LayerNorm [center=1] / RmsNorm [center=0]: stats[2 row] = mean (0 for RmsNorm),
// stats[2 row + 1] = 1 / sqrt(var + eps) (centred two-pass, biased) or 1 / sqrt(mean(x^2) + eps).
// One workgroup of {{WG}} lanes per row. Bindings: 0 = arena window (u32 words), 1 = BackwardNormStatsParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> partial: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    partial[a] = partial[a] + partial[b];
}

fn workgroup_sum(lane: u32, value: f32) -> f32 {
    partial[lane] = value;
    tree_reduce(lane, 0u);
    let total = partial[0];
    workgroupBarrier();
    return total;
}

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let count = f32(p.cols);
    var mean = 0.0;
    if (p.center == 1u) {
        var part = 0.0;
        for (var c = lane; c < p.cols; c = c + {{WG}}u) {
            part = part + ld_f32(p.x + base + c);
        }
        mean = workgroup_sum(lane, part) / count;
    }
    var squares = 0.0;
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let centred = ld_f32(p.x + base + c) - mean;
        squares = squares + centred * centred;
    }
    let inv = 1.0 / sqrt(workgroup_sum(lane, squares) / count + p.eps);
    if (lane == 0u) {
        st_f32(p.stats + 2u * row, mean);
        st_f32(p.stats + 2u * row + 1u, inv);
    }
}

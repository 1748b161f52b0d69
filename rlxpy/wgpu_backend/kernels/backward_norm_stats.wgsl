// Per-row statistics of LayerNorm [center=1] / RmsNorm [center=0]: stats[2 row] = mean (0 for RmsNorm),
// stats[2 row + 1] = 1 / sqrt(var + eps) (centred two-pass, biased) or 1 / sqrt(mean(x^2) + eps).
// One workgroup of {{WG}} lanes per row. Bindings: 0 = arena window (u32 words), 1 = BackwardNormStatsParams.
#include "common_arena.wgsl"
#include "backward_norm_row.wgsl"

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let mean = row_mean(lane, base);
    var squares = 0.0;
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let centred = ld_f32(p.x + base + c) - mean;
        squares = squares + centred * centred;
    }
    let inv = 1.0 / sqrt(workgroup_sum(lane, squares) / f32(p.cols) + p.eps);
    if (lane == 0u) {
        st_f32(p.stats + 2u * row, mean);
        st_f32(p.stats + 2u * row + 1u, inv);
    }
}

// GroupNorm: y = (x - mean) * inv_std(var + eps) * gamma[c] (+ beta[c]) over each (sample, group) row of
// x [N, C, S] (S = the spatial positions), which is contiguous: rows = N * groups, cols = (C / groups) * S,
// channel c = (row % groups) * (C / groups) + col / S. Centred two-pass variance, as norm_rows.
// One workgroup of {{WG}} lanes per row. Bindings: 0 = arena window (u32 words), 1 = NormGroupsParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "norm_workgroup_sum.wgsl"
#include "norm_inv_std.wgsl"

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let count = f32(p.cols);
    // mean = shift + mean_offset: (x - shift) is exact for values near x[0] (a large common offset)
    let shift = ld_f32(p.x + base);
    var part: f32 = 0.0;
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        part = part + (ld_f32(p.x + base + c) - shift);
    }
    let mean_offset = workgroup_sum(lane, part) / count;
    var squares: f32 = 0.0;
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let centred = (ld_f32(p.x + base + c) - shift) - mean_offset;
        squares = squares + centred * centred;
    }
    let scale = inv_std(workgroup_sum(lane, squares) / count + p.eps);
    let first_channel = (row % p.groups) * p.group_channels;
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let channel = first_channel + c / p.spatial;
        let centred = (ld_f32(p.x + base + c) - shift) - mean_offset;
        var out = centred * scale * ld_f32(p.gamma + channel);
        if (p.has_beta == 1u) {
            out = out + ld_f32(p.beta + channel);
        }
        st_f32(p.y + base + c, out);
    }
}

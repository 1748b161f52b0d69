// Per line of a float tensor [outer, C, inner] along its class axis (row = o * inner + i; CrossEntropy has
// inner = 1): the log-sum-exp lse = m + log(sum exp(x - m)) with
// an online (max, sum) pass merged over the {{WG}} lanes, then
//   MODE 0 (LogSoftmax): y[o, c, i] = x[o, c, i] - lse;
//   MODE 1 (CrossEntropy): y[row] = lse - x[row, target], 0 for a target outside [0, C).
// NaN or +inf in a row gives NaN (as torch). One workgroup per row. Bindings: 0 = arena window (u32
// words), 1 = LossRowsParams (targets read as {{TARGET}}).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "norm_softmax_online.wgsl"
#include "loss_targets.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

const MODE: u32 = {{MODE}}u;

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
    let base = row / p.inner * p.cols * p.inner + row % p.inner;
    var ms = vec2<f32>(-inf_f32(), 0.0);
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        ms = online_add(ms, ld_f32(p.x + base + c * p.inner));
    }
    part_max[lane] = ms.x;
    part_sum[lane] = ms.y;
    tree_reduce(lane, 0u);
    // an all -inf row: max -inf, sum 0, lse -inf (and x - lse NaN, as torch.log_softmax gives)
    let lse = part_max[0] + log(part_sum[0]);
    if (MODE == 0u) {
        for (var c = lane; c < p.cols; c = c + {{WG}}u) {
            st_f32(p.y + base + c * p.inner, ld_f32(p.x + base + c * p.inner) - lse);
        }
    } else if (lane == 0u) {
        let cls = target_of(row);
        st_f32(p.y + row, select(0.0, lse - ld_f32(p.x + base + min(cls, p.cols - 1u)), cls < p.cols));
    }
}

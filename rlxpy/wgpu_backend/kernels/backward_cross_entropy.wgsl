// d logits of CrossEntropy, per row of logits [rows, C]: (softmax(row) - onehot(target)) * dy[row], zeros
// for a row whose target is outside [0, C). One workgroup of {{WG}} lanes per row: an online (max, sum)
// pass merged over the lanes, then the write pass. Bindings: 0 = arena window (u32 words),
// 1 = BackwardCrossEntropyParams (targets read as {{TARGET}}).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "norm_softmax_online.wgsl"
#include "loss_targets.wgsl"
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
    let cls = target_of(row);
    let valid = cls < p.cols;
    let g = ld_f32(p.dy + row);
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let prob = exp_shift(ld_f32(p.x + base + c), row_max) / row_sum;
        let grad = (prob - select(0.0, 1.0, c == cls)) * g;
        st_f32(p.y + base + c, select(0.0, grad, valid));
    }
}

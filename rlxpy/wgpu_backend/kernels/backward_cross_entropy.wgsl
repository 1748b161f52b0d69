// d logits of CrossEntropy, per row of logits [rows, C]: (softmax(row) - onehot(target)) * dy[row], zeros
// for a row whose target is outside [0, C). One workgroup of {{WG}} lanes per row: an online (max, sum)
// pass merged over the lanes, then the write pass. Bindings: 0 = arena window (u32 words),
// 1 = BackwardCrossEntropyParams (targets read as {{TARGET}}).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "loss_targets.wgsl"
#include "common_entry_rows.wgsl"
#include "norm_softmax_workgroup.wgsl"

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let max_sum = line_max_sum(lane, base, 1u, p.cols);
    let cls = target_of(row);
    let valid = cls < p.cols;
    let g = ld_f32(p.dy + row);
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let prob = exp_shift(ld_f32(p.x + base + c), max_sum.x) / max_sum.y;
        let grad = (prob - select(0.0, 1.0, c == cls)) * g;
        st_f32(p.y + base + c, select(0.0, grad, valid));
    }
}

// Per line of a float tensor [outer, C, inner] along its class axis (row = o * inner + i; CrossEntropy has
// inner = 1): the log-sum-exp lse = m + log(sum exp(x - m)) with
// an online (max, sum) pass merged over the {{WG}} lanes, then
//   MODE 0 (LogSoftmax): y[o, c, i] = x[o, c, i] - lse;
//   MODE 1 (CrossEntropy): y[row] = lse - x[row, target], 0 for a target outside [0, C).
// NaN or +inf in a row gives NaN (as torch). One workgroup per row. Bindings: 0 = arena window (u32
// words), 1 = LossRowsParams (targets read as {{TARGET}}).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "norm_softmax_workgroup.wgsl"
#include "loss_targets.wgsl"
#include "common_entry_rows.wgsl"

const MODE: u32 = {{MODE}}u;

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row / p.inner * p.cols * p.inner + row % p.inner;
    let ms = line_max_sum(lane, base, p.inner, p.cols);
    // an all -inf row: max -inf, sum 0, lse -inf (and x - lse NaN, as torch.log_softmax gives)
    let lse = ms.x + log(ms.y);
    if (MODE == 0u) {
        for (var c = lane; c < p.cols; c = c + {{WG}}u) {
            st_f32(p.y + base + c * p.inner, ld_f32(p.x + base + c * p.inner) - lse);
        }
    } else if (lane == 0u) {
        let cls = target_of(row);
        st_f32(p.y + row, select(0.0, lse - ld_f32(p.x + base + min(cls, p.cols - 1u)), cls < p.cols));
    }
}

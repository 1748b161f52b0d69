// y[row, c] = exp(x[row, c] - m) / sum_j exp(x[row, j] - m), m = max_j x[row, j]: softmax of contiguous rows.
// One workgroup of {{WG}} lanes per row: pass 1 online (max, sum) per lane + tree merge, pass 2 writes.
// Bindings: 0 = arena window (u32 words), 1 = NormSoftmaxRowsParams (element offsets in the window).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "norm_softmax_workgroup.wgsl"
#include "common_entry_rows.wgsl"

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let ms = line_max_sum(lane, base, 1u, p.cols);
    let row_max = ms.x;
    let row_sum = ms.y;
    // a NaN max (NaN in the row) or an all -inf row gives NaN everywhere, like torch.softmax
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        st_f32(p.y + base + c, exp_shift(ld_f32(p.x + base + c), row_max) / row_sum);
    }
}

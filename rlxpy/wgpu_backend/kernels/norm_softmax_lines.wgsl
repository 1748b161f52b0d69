// y[o, r, i] = exp(x[o, r, i] - m) / sum_j exp(x[o, j, i] - m), m = max_j x[o, j, i]; any axis. Bindings:
// 0 = arena window, 1 = NormSoftmaxLinesParams. One invocation per line t = o * inner + i: online (max, sum)
// pass, then writes (phase 0); long lines go in r-chunks: phase 1 keeps (m, s) in y[o, 0..2, i], phase 2 writes.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "norm_softmax_online.wgsl"
#include "common_entry_items.wgsl"

fn run_item(t: u32) {
    if (t >= p.lines) {
        return;
    }
    let line = (t / p.inner) * p.axis_dim * p.inner + t % p.inner;
    let state_max = p.y + line;  // y[o, 0, i] and y[o, 1, i] hold (m, s) between chunked dispatches
    let state_sum = p.y + line + p.inner;
    var ms = vec2<f32>(-inf_f32(), 0.0);
    if (p.phase == 2u || (p.phase == 1u && p.start > 0u)) {
        ms = vec2<f32>(ld_f32(state_max), ld_f32(state_sum));
    }
    if (p.phase != 2u) {
        for (var r = p.start; r < p.start + p.count; r = r + 1u) {
            ms = online_add(ms, ld_f32(p.x + line + r * p.inner));
        }
    }
    if (p.phase == 1u) {
        st_f32(state_max, ms.x);
        st_f32(state_sum, ms.y);
        return;
    }
    for (var r = p.start; r < p.start + p.count; r = r + 1u) {
        let at = line + r * p.inner;
        st_f32(p.y + at, exp_shift(ld_f32(p.x + at), ms.x) / ms.y);
    }
}

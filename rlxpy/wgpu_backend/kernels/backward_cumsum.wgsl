// dx of Cumsum along any axis: the suffix sum dx[o, r, i] = sum_{j >= r} dy[o, j, i] (inclusive forward) or
// sum_{j > r} (exclusive). One invocation per line t = o * inner + i scanning r downwards, chunk by chunk:
// a dispatch covers r in [start, start + count) and, past the last chunk, continues from dx[start + count].
// Bindings: 0 = arena window (u32 words), 1 = BackwardCumsumParams.
#include "common_arena.wgsl"
#include "reduce_cumsum_scan.wgsl"

fn run_item(t: u32) {
    if (t >= p.lines) {
        return;
    }
    let line = cumsum_line(t);
    let end = p.start + p.count;
    var acc: f32 = 0.0;
    if (end < p.axis_dim) {  // a chunk before the last: carry what the later chunk wrote
        let after = line + end * p.inner;
        acc = cumsum_carry(p.dx + after, p.dy + after);
    }
    for (var r = end; r > p.start; r = r - 1u) {
        let at = line + (r - 1u) * p.inner;
        acc = cumsum_step(acc, ld_f32(p.dy + at), p.dx + at);
    }
}

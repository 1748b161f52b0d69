// y[o, r, i] = sum_{j <= r} x[o, j, i] (inclusive) or sum_{j < r} (exclusive, y[o, 0, i] = 0), any axis.
// One invocation per line t = o * inner + i scanning r in order; neighbouring invocations read neighbouring i.
// Bindings: 0 = arena window, 1 = ReduceCumsumLinesParams (r in [start, start + count): y[start - 1] is the carry).
#include "common_arena.wgsl"
#include "reduce_cumsum_scan.wgsl"

fn run_item(t: u32) {
    if (t >= p.lines) {
        return;
    }
    let line = cumsum_line(t);
    var acc: f32 = 0.0;
    if (p.start > 0u) {  // a later chunk of a long line: continue from what the previous dispatch wrote
        let before = line + (p.start - 1u) * p.inner;
        acc = cumsum_carry(p.y + before, p.x + before);
    }
    for (var r = p.start; r < p.start + p.count; r = r + 1u) {
        let at = line + r * p.inner;
        acc = cumsum_step(acc, ld_f32(p.x + at), p.y + at);
    }
}

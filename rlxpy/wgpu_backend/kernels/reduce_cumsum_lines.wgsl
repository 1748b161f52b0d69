// y[o, r, i] = sum_{j <= r} x[o, j, i] (inclusive) or sum_{j < r} (exclusive, y[o, 0, i] = 0), any axis.
// One invocation per line t = o * inner + i scanning r in order; neighbouring invocations read neighbouring i.
// Bindings: 0 = arena window, 1 = ReduceCumsumLinesParams (r in [start, start + count): y[start - 1] is the carry).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

fn run_item(t: u32) {
    if (t >= p.lines) {
        return;
    }
    let o = t / p.inner;
    let line = o * p.axis_dim * p.inner + t % p.inner;
    var acc: f32 = 0.0;
    if (p.start > 0u) {  // a later chunk of a long line: continue from what the previous dispatch wrote
        let before = line + (p.start - 1u) * p.inner;
        acc = ld_f32(p.y + before);
        if (p.exclusive == 1u) {
            acc = acc + ld_f32(p.x + before);
        }
    }
    for (var r = p.start; r < p.start + p.count; r = r + 1u) {
        let at = line + r * p.inner;
        let v = ld_f32(p.x + at);
        if (p.exclusive == 1u) {
            st_f32(p.y + at, acc);
            acc = acc + v;
        } else {
            acc = acc + v;
            st_f32(p.y + at, acc);
        }
    }
}

// dx of Cumsum along any axis: the suffix sum dx[o, r, i] = sum_{j >= r} dy[o, j, i] (inclusive forward) or
// sum_{j > r} (exclusive). One invocation per line t = o * inner + i scanning r downwards, chunk by chunk:
// a dispatch covers r in [start, start + count) and, past the last chunk, continues from dx[start + count].
// Bindings: 0 = arena window (u32 words), 1 = BackwardCumsumParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

fn run_item(t: u32) {
    if (t >= p.lines) {
        return;
    }
    let o = t / p.inner;
    let line = o * p.axis_dim * p.inner + t % p.inner;
    let end = p.start + p.count;
    var acc: f32 = 0.0;
    if (end < p.axis_dim) {  // a chunk before the last: carry what the later chunk wrote
        let after = line + end * p.inner;
        acc = ld_f32(p.dx + after);
        if (p.exclusive == 1u) {
            acc = acc + ld_f32(p.dy + after);
        }
    }
    for (var r = end; r > p.start; r = r - 1u) {
        let at = line + (r - 1u) * p.inner;
        let g = ld_f32(p.dy + at);
        if (p.exclusive == 1u) {
            st_f32(p.dx + at, acc);
            acc = acc + g;
        } else {
            acc = acc + g;
            st_f32(p.dx + at, acc);
        }
    }
}

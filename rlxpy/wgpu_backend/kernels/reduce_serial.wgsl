// y[o, i] = reduce_r x[o, r, i] (sum/mean/max/min/prod) for short reductions (reduce_dim <= 64).
// One invocation per output t = o * inner + i folding r in order (loads 8 at a time); neighbouring invocations
// read neighbouring i.
// Bindings: 0 = arena window (u32 words), 1 = ReduceSerialParams (divisor = n for mean, else 1).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "reduce_combine.wgsl"
#include "common_entry_items.wgsl"

fn run_item(t: u32) {
    if (t >= p.outputs) {
        return;
    }
    let o = t / p.inner;
    let i = t % p.inner;
    let base = p.x + o * p.reduce_dim * p.inner + i;
    var acc: f32 = {{IDENTITY}};
    // 8 loads issued together, then folded in order: the loads' latency overlaps instead of adding up
    // (a bias gradient's first stage folds 32 rows per thread), and the result is the serial fold's
    var r = 0u;
    for (; r + 8u <= p.reduce_dim; r = r + 8u) {
        let at = base + r * p.inner;
        let x0 = ld_f32(at);
        let x1 = ld_f32(at + p.inner);
        let x2 = ld_f32(at + 2u * p.inner);
        let x3 = ld_f32(at + 3u * p.inner);
        let x4 = ld_f32(at + 4u * p.inner);
        let x5 = ld_f32(at + 5u * p.inner);
        let x6 = ld_f32(at + 6u * p.inner);
        let x7 = ld_f32(at + 7u * p.inner);
        acc = combine(combine(combine(combine(acc, x0), x1), x2), x3);
        acc = combine(combine(combine(combine(acc, x4), x5), x6), x7);
    }
    for (; r < p.reduce_dim; r = r + 1u) {
        acc = combine(acc, ld_f32(base + r * p.inner));
    }
    st_f32(p.y + t, acc / p.divisor);
}

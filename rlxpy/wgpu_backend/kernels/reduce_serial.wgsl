// y[o, i] = reduce_r x[o, r, i] (sum/mean/max/min/prod) for short reductions (reduce_dim <= 64).
// One invocation per output t = o * inner + i folding r in order; neighbouring invocations read neighbouring i.
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
    for (var r = 0u; r < p.reduce_dim; r = r + 1u) {
        acc = combine(acc, ld_f32(base + r * p.inner));
    }
    st_f32(p.y + t, acc / p.divisor);
}

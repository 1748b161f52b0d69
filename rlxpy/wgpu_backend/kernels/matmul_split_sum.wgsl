// The end of a split-K matmul_tiled: y[i] = sum_s part[s*total + i], the splits added in order
// (deterministic), one invocation per output element. Bindings: 0 = arena window (u32 words),
// 1 = MatmulSplitSumParams (element offsets of the partial blocks and of y).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i < p.total) {
        var acc = 0.0;
        var at = p.part + i;
        for (var s = 0u; s < p.splits; s = s + 1u) {
            acc = acc + ld_f32(at);
            at = at + p.total;
        }
        st_f32(p.y + i, acc);
    }
}

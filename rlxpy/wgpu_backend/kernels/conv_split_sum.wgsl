// The end of a split-K conv_gemm: y[i] = act(bias[co] + sum_s part[s*total + i]), one invocation per
// output element, splits summed in order (deterministic). Bindings: 0 = arena window (u32 words),
// 1 = ConvParams (part = the partial sums' element offset).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_epilogue.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    var acc = 0.0;
    for (var s = 0u; s < p.splits; s = s + 1u) {
        acc = acc + ld_f32(p.part + s * p.total + i);
    }
    st_f32(p.y + i, finish((i / p.positions) % p.c_out, i, acc));
}

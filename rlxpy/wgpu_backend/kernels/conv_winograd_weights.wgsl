// Winograd F(m x m, 3x3), weight transform: U[t][co][ci] = (G g G^T)[t / n][t % n] for the 3x3 kernel
// g = w[co, ci] (n = m + 2 points; G's entries are generated from exact rationals by
// lowering/conv_winograd_transforms.py and written out where TRANSFORM stands). One invocation per
// (co, ci); U's n * n matrices [c_out, c_in] are the GEMM's a operands.
// Bindings: 0 = arena window (u32 words), 1 = ConvWinogradParams (element offsets).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let src = p.w + i * 9u;  // w[co, ci] is 9 consecutive words: i = co * c_in + ci
    let plane = p.c_out * p.c_in;
    let first = p.u + i;
{{TRANSFORM}}
}

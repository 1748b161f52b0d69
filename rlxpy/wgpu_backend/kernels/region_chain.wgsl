// A fused element-wise chain (ElementwiseRegion; BatchElementwiseRegion one dispatch per slice): one
// invocation per output element e. The body (BODY) loads the inputs the chain reads (by the region's read
// rule: at e, at 0, at e % m, or the 2x-nearest prologue pixel), runs the steps as the standalone
// element-wise kernels would (same expressions, same conversions; bool as u32 0/1) and stores the
// last step's value at y + e. T is the integer compute type of integer steps (pow_int).
// Bindings: 0 = arena window (u32 words), 1 = RegionChainParams (element offsets in the window).
#include "common_arena.wgsl"
#include "common_math.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"
#include "elementwise_pow_float.wgsl"
#include "elementwise_pow_int.wgsl"

alias T = {{T}};

fn run_item(e: u32) {
    if (e >= p.n) {
        return;
    }
{{BODY}}
}

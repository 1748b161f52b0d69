// y[i] = x[i] for n 32-bit words: a plain copy inside the arena (copy_buffer_to_buffer refuses
// a source and destination in the same buffer). One invocation per word.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseCopyWordsParams (word offsets in the window).
#include "common_arena.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    buf[p.y + i] = buf[p.x + i];
}

// cache[(pos + r) * width + c] = rows[r * width + c] for r < n_rows with pos read from the arena
// at run time (a KV-cache append); rows past the capacity are dropped. One thread per word.
// Bindings: 0 = arena window (u32 words), 1 = KvWriteParams (word offsets in the window).
#include "common_arena.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let r = i / p.width;
    let c = i % p.width;
    let row = buf[p.pos] + r;
    if (row < p.capacity) {
        buf[p.cache + row * p.width + c] = buf[p.rows + i];
    }
}

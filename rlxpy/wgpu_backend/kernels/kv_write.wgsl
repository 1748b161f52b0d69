// cache[(pos + r) * width + c] = rows[r * width + c] for r < n_rows with pos read from the arena
// at run time (a KV-cache append); rows past the capacity are dropped. slot > 0: row r goes to
// cache row r * slot + pos[r] instead (one position per row, dropped past its slot). One thread per word.
// Bindings: 0 = arena window (u32 words), 1 = KvWriteParams (word offsets in the window).
#include "common_arena.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let r = i / p.width;
    let c = i % p.width;
    var row = buf[p.pos] + r;
    if (p.slot > 0u) {  // batched decode: row r into slot r (of `slot` rows) at its own position
        row = select(p.capacity, r * p.slot + buf[p.pos + r], buf[p.pos + r] < p.slot);
    }
    if (row < p.capacity) {
        buf[p.cache + row * p.width + c] = buf[p.rows + i];
    }
}

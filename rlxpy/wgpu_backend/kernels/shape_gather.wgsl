// y[o, k, t] = table[o, clamp(trunc(idx[k]), 0, dim-1), t]: numpy.take along one axis (embedding lookup at axis 0).
// 4/8-byte elements: one thread per output word; 1/2-byte: one thread per packed output word (no shared words).
// Bindings: 0 = arena window (u32 words), 1 = ShapeGatherParams (word offsets x, idx, y; inner/count/dim in elements).
#include "common_arena.wgsl"
#include "common_entry_items.wgsl"
#include "shape_gather_rows.wgsl"

// Table element read by output element e.
fn source(e: u32) -> u32 {
    let t = e % p.inner;
    let rest = e / p.inner;
    let k = rest % p.count;
    let o = rest / p.count;
    return (o * p.dim + row_of(k)) * p.inner + t;
}

fn run_item(w: u32) {
    if (w >= p.words) {
        return;
    }
    if (p.elem_bytes >= 4u) {
        let wpe = p.elem_bytes / 4u;
        buf[p.y + w] = buf[p.x + source(w / wpe) * wpe + w % wpe];
        return;
    }
    // packed 1/2-byte elements; the padding past the last element is written as zero bits
    let per = 4u / p.elem_bytes;
    let bits = 8u * p.elem_bytes;
    let mask = (1u << bits) - 1u;
    var word = 0u;
    for (var j = 0u; j < per; j = j + 1u) {
        let e = w * per + j;
        if (e < p.n) {
            let s = source(e);
            word = word | (((buf[p.x + s / per] >> ((s % per) * bits)) & mask) << (j * bits));
        }
    }
    buf[p.y + w] = word;
}

// y[o, k, t] = table[o, clamp(trunc(idx[k]), 0, dim-1), t]: numpy.take along one axis (embedding lookup at axis 0).
// 4/8-byte elements: one thread per output word; 1/2-byte: one thread per packed output word (no shared words).
// Bindings: 0 = arena window (u32 words), 1 = ShapeGatherParams (word offsets x, idx, y; inner/count/dim in elements).
#include "common_arena.wgsl"
#include "common_entry_items.wgsl"

// Row picked by index k: truncated, then clamped into [0, dim - 1] (NaN -> 0), read as the index
// dtype {{INDEX}}.
fn row_i32(k: u32) -> u32 {
    let v = bitcast<i32>(buf[p.idx + k]);
    return select(min(u32(v), p.dim - 1u), 0u, v < 0);
}
fn row_u32(k: u32) -> u32 {
    return min(buf[p.idx + k], p.dim - 1u);
}
fn row_f32(k: u32) -> u32 {
    let v = bitcast<f32>(buf[p.idx + k]);
    return select(min(u32(v), p.dim - 1u), 0u, !(v >= 1.0));
}
// little-endian i64: a negative high word clamps to 0, any other non-zero high word to dim - 1
fn row_i64(k: u32) -> u32 {
    let low = buf[p.idx + 2u * k];
    let high = buf[p.idx + 2u * k + 1u];
    if ((high & 0x80000000u) != 0u) {
        return 0u;
    }
    return select(min(low, p.dim - 1u), p.dim - 1u, high != 0u);
}
fn row_of(k: u32) -> u32 {
    return row_{{INDEX}}(k);
}

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

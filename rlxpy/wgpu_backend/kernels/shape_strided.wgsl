// y[dst(e)] = x[src(e)] over a rank-6 index space, src/dst = base + sum(coord_k * stride_k) in elements.
// 4/8-byte elements: one thread per output word; 1/2-byte: one thread per packed (contiguous) destination word.
// Bindings: 0 = arena window (u32 words), 1 = ShapeStridedParams (x, y in words; dims, strides, bases in elements).
#include "common_arena.wgsl"
#include "common_entry_items.wgsl"

const SKIP: u32 = 0xffffffffu;

// (source element, destination element) of iteration index e, or (SKIP, SKIP) outside the keep range.
// Bases and strides are u32 and wrap: a negative source base (concat) comes back in range.
fn locate(e: u32) -> vec2<u32> {
    var dims = array<u32, 6>(p.d0, p.d1, p.d2, p.d3, p.d4, p.d5);
    var src_strides = array<u32, 6>(p.s0, p.s1, p.s2, p.s3, p.s4, p.s5);
    var dst_strides = array<u32, 6>(p.t0, p.t1, p.t2, p.t3, p.t4, p.t5);
    var rest = e;
    var src = p.src_base;
    var dst = p.dst_base;
    for (var k = 5; k >= 0; k = k - 1) {
        let c = rest % dims[k];
        rest = rest / dims[k];
        if (u32(k) == p.keep_axis && (c < p.keep_lo || c >= p.keep_hi)) {
            return vec2<u32>(SKIP, SKIP);
        }
        src = src + c * src_strides[k];
        dst = dst + c * dst_strides[k];
    }
    return vec2<u32>(src, dst);
}

fn run_item(t: u32) {
    if (t >= p.words) {
        return;
    }
    if (p.elem_bytes >= 4u) {
        // word-sized elements (f32/i32/u32/bool) or two-word ones (i64/f64): copy word `part`
        let wpe = p.elem_bytes / 4u;
        let at = locate(t / wpe);
        if (at.x == SKIP) {
            return;
        }
        let part = t % wpe;
        buf[p.y + at.y * wpe + part] = buf[p.x + at.x * wpe + part];
        return;
    }
    // packed 1/2-byte elements: destination element d = iteration index + dst_base; the thread
    // rebuilds its whole word, keeping the bits of elements it does not produce
    let per = 4u / p.elem_bytes;
    let bits = 8u * p.elem_bytes;
    let mask = (1u << bits) - 1u;
    let w = p.w0 + t;
    var word = buf[p.y + w];
    for (var j = 0u; j < per; j = j + 1u) {
        let e = w * per + j - p.dst_base;
        if (e >= p.n) {
            continue;
        }
        let at = locate(e);
        if (at.x == SKIP) {
            continue;
        }
        let value = (buf[p.x + at.x / per] >> ((at.x % per) * bits)) & mask;
        let shift = j * bits;
        word = (word & ~(mask << shift)) | (value << shift);
    }
    buf[p.y + w] = word;
}

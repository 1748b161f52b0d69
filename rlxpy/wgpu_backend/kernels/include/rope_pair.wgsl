// The rotation of Rope at element e of [..., S, L] (rope_rotate, backward_rope), d = its dim within the
// head (d < n_rot): position s + offset [+ the pos input's value], clamped into the table (a run-time
// position past it cannot raise); the pair is (i, i + n_rot/2) or, when INTERLEAVED, (2i, 2i + 1).
// partner is the other element of e's pair, first whether e is the pair's first; c, s its cos and sin.
// rotate_item applies it: sin_sign 1 rotates by theta (Rope), -1 by -theta (its backward); dims >= n_rot
// are copied unchanged.
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

const INTERLEAVED: bool = {{INTERLEAVED}};

struct RopePair {
    c: f32,
    s: f32,
    partner: u32,
    first: bool,
}

fn rope_pair(e: u32, d: u32) -> RopePair {
    var pos = i32((e / p.width) % p.seq) + p.offset;
    if (p.has_pos == 1u) {
        pos += ld_i32(p.pos_input);
    } else if (p.has_pos == 2u) {  // one position per [S, L] block (batched decode)
        pos += ld_i32(p.pos_input + e / (p.width * p.seq));
    }
    let row = u32(clamp(pos, 0, i32(p.max_pos) - 1));
    let half = p.n_rot / 2u;
    var i: u32;
    var partner: u32;
    var first: bool;
    if (INTERLEAVED) {
        i = d / 2u;
        first = (d & 1u) == 0u;
        partner = select(e - 1u, e + 1u, first);
    } else {
        i = d % half;
        first = d < half;
        partner = select(e - half, e + half, first);
    }
    return RopePair(ld_f32(p.cos + row * half + i), ld_f32(p.sin + row * half + i), partner, first);
}

fn rotate_item(src: u32, dst: u32, e: u32, sin_sign: f32) {
    if (e >= p.n) {
        return;
    }
    let d = (e % p.width) % p.head_dim;
    let v = ld_f32(src + e);
    if (d >= p.n_rot) {
        st_f32(dst + e, v);
        return;
    }
    let pair = rope_pair(e, d);
    let s = sin_sign * pair.s;
    let other = ld_f32(src + pair.partner);
    st_f32(dst + e, select(v * pair.c + other * s, v * pair.c - other * s, pair.first));
}

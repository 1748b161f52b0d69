// dx of Rope, f32: the rotation by -theta, per head pair (a, b) -> (a c + b s, b c - a s); dims >= n_rot
// pass dy through. One thread per element of dy [..., S, L]; pairs are (i, i + n_rot/2) or, interleaved,
// (2i, 2i + 1). Bindings: 0 = arena window (u32 words), 1 = BackwardRopeParams (position = s + offset
// [+ the pos input's value], clamped into the table as the forward does).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

const INTERLEAVED: bool = {{INTERLEAVED}};

fn run_item(e: u32) {
    if (e >= p.n) {
        return;
    }
    let d = (e % p.width) % p.head_dim;
    let g = ld_f32(p.dy + e);
    if (d >= p.n_rot) {
        st_f32(p.dx + e, g);
        return;
    }
    var pos = i32((e / p.width) % p.seq) + p.offset;
    if (p.has_pos == 1u) {
        pos += ld_i32(p.pos_input);
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
    let c = ld_f32(p.cos + row * half + i);
    let s = ld_f32(p.sin + row * half + i);
    let other = ld_f32(p.dy + partner);
    st_f32(p.dx + e, select(g * c - other * s, g * c + other * s, first));
}

// Rotary embedding, f32: per head, pair (a, b) -> (a c - b s, b c + a s); dims >= n_rot copied unchanged.
// One thread per output element of x [..., S, L]; pairs are (i, i + n_rot/2) or, interleaved, (2i, 2i + 1).
// Bindings: 0 = arena window (u32 words), 1 = RopeRotateParams (position = s + offset [+ pos input value]).
#include "common_arena.wgsl"
#include "rope_pair.wgsl"

fn run_item(e: u32) {
    if (e >= p.n) {
        return;
    }
    let col = e % p.width;
    let d = col % p.head_dim;
    let x = ld_f32(p.x + e);
    if (d >= p.n_rot) {
        st_f32(p.y + e, x);
        return;
    }
    let pair = rope_pair(e, d);
    let other = ld_f32(p.x + pair.partner);
    st_f32(p.y + e, select(x * pair.c + other * pair.s, x * pair.c - other * pair.s, pair.first));
}

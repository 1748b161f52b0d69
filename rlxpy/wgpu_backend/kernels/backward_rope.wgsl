// dx of Rope, f32: the rotation by -theta, per head pair (a, b) -> (a c + b s, b c - a s); dims >= n_rot
// pass dy through. One thread per element of dy [..., S, L]; pairs are (i, i + n_rot/2) or, interleaved,
// (2i, 2i + 1). Bindings: 0 = arena window (u32 words), 1 = BackwardRopeParams (position = s + offset
// [+ the pos input's value], clamped into the table as the forward does).
#include "common_arena.wgsl"
#include "rope_pair.wgsl"

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
    let pair = rope_pair(e, d);
    let other = ld_f32(p.dy + pair.partner);
    st_f32(p.dx + e, select(g * pair.c - other * pair.s, g * pair.c + other * pair.s, pair.first));
}

// Rotary embedding, f32: per head, pair (a, b) -> (a c - b s, b c + a s); dims >= n_rot copied unchanged.
// One thread per output element of x [..., S, L]; pairs are (i, i + n_rot/2) or, interleaved, (2i, 2i + 1).
// Bindings: 0 = arena window (u32 words), 1 = RopeRotateParams (position = s + offset [+ pos input value]).
#include "common_arena.wgsl"
#include "rope_pair.wgsl"

fn run_item(e: u32) {
    rotate_item(p.x, p.y, e, 1.0);
}

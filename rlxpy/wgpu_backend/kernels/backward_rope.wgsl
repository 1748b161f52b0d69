// dx of Rope, f32: the rotation by -theta, per head pair (a, b) -> (a c + b s, b c - a s); dims >= n_rot
// pass dy through. One thread per element of dy [..., S, L]; pairs are (i, i + n_rot/2) or, interleaved,
// (2i, 2i + 1). Bindings: 0 = arena window (u32 words), 1 = BackwardRopeParams (position = s + offset
// [+ the pos input's value], clamped into the table as the forward does).
#include "common_arena.wgsl"
#include "rope_pair.wgsl"

fn run_item(e: u32) {
    rotate_item(p.dy, p.dx, e, -1.0);
}

// BatchNorm (inference): y = (x - mean[c]) * inv_std(variance[c] + eps) * gamma[c] + beta[c] for x [N, C, S]
// (S = the spatial positions), channel c = (i / S) % C. One invocation per element.
// Bindings: 0 = arena window (u32 words), 1 = NormBatchParams (element offsets in the window).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"
#include "norm_inv_std.wgsl"

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let c = (i / p.spatial) % p.channels;
    let scale = inv_std(ld_f32(p.variance + c) + p.eps);
    let centred = ld_f32(p.x + i) - ld_f32(p.mean + c);
    st_f32(p.y + i, centred * scale * ld_f32(p.gamma + c) + ld_f32(p.beta + c));
}

// Im2Col: out[row, col] = x[n, c, ho*sh + ki*dh - ph, wo*sw + kj*dw - pw] (0 in the padding), rows
// (n, ho, wo), columns (c, ki, kj); one invocation per output element. Bindings: 0 = arena window
// (u32 words), 1 = ConvParams (kdim = columns, kvol = kh*kw; 2-D, so the d axis is 1).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_taps.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let col = i % p.kdim;
    let r = i / p.kdim;
    let at = out_position(r);  // (oh, ow) of r = n * positions + (oh * out_w + ow)
    let n = r / p.positions;
    let c = col / p.kvol;
    let tap = col % p.kvol;
    st_f32(p.y + i, x_at(n * p.c_in + c, 0u, at.y, at.z, 0u, tap / p.k_w, tap % p.k_w));
}

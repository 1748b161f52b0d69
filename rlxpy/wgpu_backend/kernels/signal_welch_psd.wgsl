// Welch PSD, one invocation per (batch b, one-sided bin k): psd = mean_s |X_{b*segments+s}[k]|^2, doubled
// except for DC and (even n_fft) Nyquist. Bin k of row r at spec + r * spec_row + k * spec_elem, the
// imaginary part spec_im further (c64 or the f32 block layout). Bindings: 0 = arena window, 1 = SignalWelchPsdParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.batch * p.bins) {
        return;
    }
    let b = i / p.bins;
    let k = i % p.bins;
    var acc: f32 = 0.0;
    for (var s = 0u; s < p.segments; s = s + 1u) {
        let w = p.spec + (b * p.segments + s) * p.spec_row + k * p.spec_elem;
        let re = ld_f32(w);
        let im = ld_f32(w + p.spec_im);
        acc = acc + re * re + im * im;
    }
    var psd = acc / f32(p.segments);
    if (k > 0u && 2u * k != p.n_fft) {
        psd = 2.0 * psd;
    }
    st_f32(p.psd + i, psd);
}

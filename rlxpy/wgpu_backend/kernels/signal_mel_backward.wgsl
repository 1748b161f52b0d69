// LogMelBackward, one workgroup of {{WG}} lanes per tile of 4 frames (vec4 components): E_m and L_m again
// (signal_mel_energy), the floor (per frame: max_m L - 8; per spectrogram: floors[frame / frames_per],
// from signal_mel_floor), dL_m = dy_m / 4 unless L_m is within 1e-6 of the floor, dE_m = dL_m / (E_m ln 10)
// where E_m > 1e-10 (else 0), then for each bin k < n_bins: d re_k = 2 re_k dP_k, d im_k = 2 im_k dP_k
// with dP_k = sum_m dE_m filters[m, k]; the block layout's bins past n_bins get 0. grad has the
// spectrum's layout. Bindings: 0 = arena window (u32 words), 1 = SignalMelBackwardParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "signal_mel_energy.wgsl"

var<workgroup> d_energy: array<vec4<f32>, {{MELS}}>;

const LN_10: f32 = 2.302585092994046;

fn mel_keep(first: u32, m: u32, energy: vec4<f32>, logs: vec4<f32>) {
    d_energy[m] = energy;  // E for now (this lane's mels), dE once the floor is known
}

fn run_row(tile: u32, lane: u32) {
    let first = tile * 4u;
    if (first >= p.frames) {
        return;
    }
    var floor = mel_maxima(first, lane) - vec4<f32>(8.0);
    for (var m = lane; m < p.mels; m = m + {{WG}}u) {
        let energy = d_energy[m];
        var d = vec4<f32>(0.0);
        for (var f = 0u; f < 4u; f = f + 1u) {
            let frame = first + f;
            if (frame < p.frames) {
                if (p.floor_mode == 2u) {
                    floor[f] = ld_f32(p.floors + frame / p.frames_per);
                }
                var d_log = ld_f32(p.dy + frame * p.mels + m) * 0.25;
                if (abs(maxp(clamped_log10(energy[f]), floor[f]) - floor[f]) <= 1e-6) {
                    d_log = 0.0;
                }
                if (energy[f] > 1e-10) {
                    d[f] = d_log / (energy[f] * LN_10);
                }
            }
        }
        d_energy[m] = d;
    }
    workgroupBarrier();
    for (var k = lane; k < p.grad_bins; k = k + {{WG}}u) {
        var d_power = vec4<f32>(0.0);
        if (k < p.bins) {
            for (var m = 0u; m < p.mels; m = m + 1u) {
                d_power = d_power + d_energy[m] * ld_f32(p.filters + m * p.bins + k);
            }
        }
        for (var f = 0u; f < 4u; f = f + 1u) {
            let frame = first + f;
            if (frame < p.frames) {
                var re = 0.0;
                var im = 0.0;
                if (k < p.bins) {
                    let w = p.spec + frame * p.spec_row + k * p.spec_elem;
                    re = 2.0 * ld_f32(w) * d_power[f];
                    im = 2.0 * ld_f32(w + p.spec_im) * d_power[f];
                }
                let out = p.grad + frame * p.spec_row + k * p.spec_elem;
                st_f32(out, re);
                st_f32(out + p.spec_im, im);
            }
        }
    }
}

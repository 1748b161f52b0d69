// LogMel, one workgroup of {{WG}} lanes per tile of 4 frames: L_m = log10(max(E_m, 1e-10))
// (signal_mel_energy) and each frame's max_m L (NaN-propagating). floor_mode 1 (per frame):
// y = (max(L, max L - 8) + 4) / 4. floor_mode 2 (per spectrogram): y = L (when write_y) and each frame's
// max at maxes[frame]; signal_mel_floor finishes. Bindings: 0 = arena window (u32 words), 1 = SignalMelFramesParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "signal_mel_energy.wgsl"

fn mel_keep(first: u32, m: u32, energy: vec4<f32>, logs: vec4<f32>) {
    if (p.write_y == 1u) {
        for (var f = 0u; f < 4u; f = f + 1u) {
            if (first + f < p.frames) {
                st_f32(p.y + (first + f) * p.mels + m, logs[f]);
            }
        }
    }
}

fn run_row(tile: u32, lane: u32) {
    let first = tile * 4u;
    if (first >= p.frames) {
        return;
    }
    let maxima = mel_maxima(first, lane);
    if (p.floor_mode == 2u) {
        if (lane < 4u && first + lane < p.frames) {
            st_f32(p.maxes + first + lane, maxima[lane]);
        }
        return;
    }
    for (var f = 0u; f < 4u; f = f + 1u) {
        if (first + f < p.frames) {
            let floor = maxima[f] - 8.0;
            for (var m = lane; m < p.mels; m = m + {{WG}}u) {  // this lane's own values, written above
                let at = p.y + (first + f) * p.mels + m;
                st_f32(at, (maxp(ld_f32(at), floor) + 4.0) * 0.25);
            }
        }
    }
}

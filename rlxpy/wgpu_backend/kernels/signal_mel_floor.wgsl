// LogMel's per-spectrogram floor: `parts` workgroups of {{WG}} lanes per spectrogram s of `frames` frames
// each reduce their maxima (maxes, from signal_mel_frames) to floor = max - 8 (NaN-propagating), then
// either finish y = (max(L, floor) + 4) / 4 over their part, `span` of the spectrogram's frames * mels
// values (apply = 1: a 30 s spectrogram's 240k values in one workgroup took most of a log-mel's time),
// or store the floor at floors[s] for LogMelBackward (apply = 0, one part).
// Bindings: 0 = arena window, 1 = SignalMelFloorParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_float.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> partial: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    partial[a] = maxp(partial[a], partial[b]);
}

fn run_row(row: u32, lane: u32) {
    let s = row / p.parts;
    if (s >= p.spectrograms) {
        return;
    }
    var top = -inf_f32();
    for (var f = lane; f < p.frames; f = f + {{WG}}u) {
        top = maxp(top, ld_f32(p.maxes + s * p.frames + f));
    }
    partial[lane] = top;
    tree_reduce(lane, 0u);
    let floor = partial[0] - 8.0;
    if (p.apply == 0u) {
        if (lane == 0u) {
            st_f32(p.floors + s, floor);
        }
        return;
    }
    let count = p.frames * p.mels;
    let base = p.y + s * count;
    let end = min(count, (row % p.parts + 1u) * p.span);
    for (var i = (row % p.parts) * p.span + lane; i < end; i = i + {{WG}}u) {
        st_f32(base + i, (maxp(ld_f32(base + i), floor) + 4.0) * 0.25);
    }
}

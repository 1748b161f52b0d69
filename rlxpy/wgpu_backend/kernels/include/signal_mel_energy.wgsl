// Mel energies of a tile of 4 frames (one vec4 component each): E_m = sum_k filters[m, k] * |X_k|^2 over
// the n_bins spectrum bins of frames first .. first + 3, bin k at spec + frame * spec_row + k * spec_elem
// (imaginary part spec_im further: c64 or the f32 block layout). The tile's power is staged {{CHUNK}}
// bins at a time in workgroup memory as one vec4 per bin, so each filter weight a lane loads serves the
// 4 frames in one multiply-add; lane `lane` sums mel group * {{WG}} + lane. Call from uniform control flow.
#include "common_float.wgsl"

var<workgroup> power: array<vec4<f32>, {{CHUNK}}>;

const LOG10_2: f32 = 0.30102999566398120;

fn mel_energies(first: u32, group: u32, lane: u32) -> vec4<f32> {
    let m = group * {{WG}}u + lane;
    var acc = vec4<f32>(0.0);
    for (var start = 0u; start < p.bins; start = start + {{CHUNK}}u) {
        let count = min({{CHUNK}}u, p.bins - start);
        for (var k = lane; k < count; k = k + {{WG}}u) {
            var value = vec4<f32>(0.0);
            for (var f = 0u; f < 4u; f = f + 1u) {
                if (first + f < p.frames) {
                    let w = p.spec + (first + f) * p.spec_row + (start + k) * p.spec_elem;
                    let re = ld_f32(w);
                    let im = ld_f32(w + p.spec_im);
                    value[f] = re * re + im * im;
                }
            }
            power[k] = value;
        }
        workgroupBarrier();
        if (m < p.mels) {
            let weights = p.filters + m * p.bins + start;
            for (var k = 0u; k < count; k = k + 1u) {
                acc = acc + ld_f32(weights + k) * power[k];
            }
        }
        workgroupBarrier();
    }
    return acc;
}

// log10(max(E, 1e-10)), NaN kept (WGSL's max may drop it)
fn clamped_log10(energy: f32) -> f32 {
    return log2(maxp(energy, 1e-10)) * LOG10_2;
}

fn maxp4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(maxp(a.x, b.x), maxp(a.y, b.y), maxp(a.z, b.z), maxp(a.w, b.w));
}

// the maxima of the tile's 4 frames, one vec4 slot per lane of `partial` (common_workgroup_tree)
fn tree_merge(tree: u32, a: u32, b: u32) {
    partial[a] = maxp4(partial[a], partial[b]);
}

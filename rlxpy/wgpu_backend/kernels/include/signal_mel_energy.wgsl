// Mel energies of a tile of 4 frames (one vec4 component each): E_m = sum_k filters[m, k] * |X_k|^2 over
// the n_bins spectrum bins of frames first .. first + 3, bin k at spec + frame * spec_row + k * spec_elem
// (imaginary part spec_im further: c64 or the f32 block layout). The tile's power is staged {{CHUNK}}
// bins at a time in workgroup memory as one vec4 per bin, so each filter weight a lane loads serves the
// 4 frames in one multiply-add; lane `lane` sums mel group * {{WG}} + lane. Call from uniform control flow.
// mel_maxima gives each frame's max_m L_m; the kernel's mel_keep(first, m, energy, logs) sees each mel's
// E_m and L_m (logs[f] is 0 for frames past p.frames) on the lane that sums it.
#include "common_float.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> power: array<vec4<f32>, {{CHUNK}}>;
var<workgroup> partial: array<vec4<f32>, {{WG}}>;

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

// max_m log10(max(E_m, 1e-10)) of each of the tile's 4 frames (NaN-propagating), in every lane; mel_keep
// first sees each of this lane's mels. Call from uniform control flow.
fn mel_maxima(first: u32, lane: u32) -> vec4<f32> {
    var top = vec4<f32>(-inf_f32());
    let groups = (p.mels + {{WG}}u - 1u) / {{WG}}u;
    for (var group = 0u; group < groups; group = group + 1u) {
        let energy = mel_energies(first, group, lane);
        let m = group * {{WG}}u + lane;
        if (m < p.mels) {
            var logs = vec4<f32>(0.0);
            for (var f = 0u; f < 4u; f = f + 1u) {
                if (first + f < p.frames) {
                    logs[f] = clamped_log10(energy[f]);
                    top[f] = maxp(top[f], logs[f]);
                }
            }
            mel_keep(first, m, energy, logs);
        }
    }
    partial[lane] = top;
    tree_reduce(lane, 0u);
    return partial[0];
}

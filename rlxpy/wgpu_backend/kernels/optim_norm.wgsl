// GradClipScale, f32, in two phases. PHASE 0: up to 8 gradients per dispatch, gradient k = workgroup y
// (offset x_k, n_k elements, its partials from slot_k: fields x0..x7, n0..n7, slot0..slot7); workgroup w
// of it sums the squares of its {{WG}} x CHUNK elements into partial[slot_k + w]. PHASE 1 (one workgroup, n0 partials): y = scale *
// min(1, max_norm / (scale * sqrt(sum of the partials) + 1e-6)), or scale when max_norm is 0 (no clipping:
// no partials). Bindings: 0 = arena window (u32 words), 1 = OptimNormParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_workgroup_tree.wgsl"

const PHASE: u32 = {{PHASE}}u;
const CHUNK: u32 = {{CHUNK}}u;

var<workgroup> sums: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    sums[a] = sums[a] + sums[b];
}

// (offset, elements, first partial slot) of gradient k of this dispatch
fn gradient(k: u32) -> vec3<u32> {
    switch k {
        case 0u: { return vec3<u32>(p.x0, p.n0, p.slot0); }
        case 1u: { return vec3<u32>(p.x1, p.n1, p.slot1); }
        case 2u: { return vec3<u32>(p.x2, p.n2, p.slot2); }
        case 3u: { return vec3<u32>(p.x3, p.n3, p.slot3); }
        case 4u: { return vec3<u32>(p.x4, p.n4, p.slot4); }
        case 5u: { return vec3<u32>(p.x5, p.n5, p.slot5); }
        case 6u: { return vec3<u32>(p.x6, p.n6, p.slot6); }
        default: { return vec3<u32>(p.x7, p.n7, p.slot7); }
    }
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    var acc = 0.0;
    if (PHASE == 0u) {
        let g = gradient(wid.y);
        let first = wid.x * {{WG}}u * CHUNK;
        if (first >= g.y) {  // past this gradient's last partial (the whole workgroup)
            return;
        }
        for (var k = 0u; k < CHUNK; k++) {
            let e = first + k * {{WG}}u + lane;
            if (e < g.y) {
                let v = ld_f32(g.x + e);
                acc = acc + v * v;
            }
        }
    } else {
        for (var k = lane; k < p.n0; k = k + {{WG}}u) {
            acc = acc + ld_f32(p.partial + k);
        }
    }
    sums[lane] = acc;
    tree_reduce(lane, 0u);
    if (lane == 0u) {
        if (PHASE == 0u) {
            st_f32(p.partial + gradient(wid.y).z + wid.x, sums[0]);
        } else {
            let norm = p.scale * sqrt(sums[0]);
            st_f32(p.y, select(p.scale * min(1.0, p.max_norm / (norm + 1e-6)), p.scale, p.max_norm == 0.0));
        }
    }
}

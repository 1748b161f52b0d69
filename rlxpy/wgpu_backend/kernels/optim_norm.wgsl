// GradClipScale, f32, in two phases. PHASE 0 (one dispatch per gradient): workgroup w sums the squares of
// its {{WG}} x CHUNK elements of x into partial[slot + w]. PHASE 1 (one workgroup): y = scale *
// min(1, max_norm / (scale * sqrt(sum of every partial) + 1e-6)), or
// scale when max_norm is 0 (no clipping: no partials). Bindings: 0 = arena window (u32 words),
// 1 = OptimNormParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_workgroup_tree.wgsl"

const PHASE: u32 = {{PHASE}}u;
const CHUNK: u32 = {{CHUNK}}u;

var<workgroup> sums: array<f32, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    sums[a] = sums[a] + sums[b];
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    var acc = 0.0;
    if (PHASE == 0u) {
        let group = wid.x + wid.y * nwg.x;
        let first = group * {{WG}}u * CHUNK;
        for (var k = 0u; k < CHUNK; k++) {
            let e = first + k * {{WG}}u + lane;
            if (e < p.n) {
                let g = ld_f32(p.x + e);
                acc = acc + g * g;
            }
        }
    } else {
        for (var k = lane; k < p.n; k = k + {{WG}}u) {
            acc = acc + ld_f32(p.partial + k);
        }
    }
    sums[lane] = acc;
    tree_reduce(lane, 0u);
    if (lane == 0u) {
        if (PHASE == 0u) {
            st_f32(p.partial + p.slot + wid.x + wid.y * nwg.x, sums[0]);
        } else {
            let norm = p.scale * sqrt(sums[0]);
            st_f32(p.y, select(p.scale * min(1.0, p.max_norm / (norm + 1e-6)), p.scale, p.max_norm == 0.0));
        }
    }
}

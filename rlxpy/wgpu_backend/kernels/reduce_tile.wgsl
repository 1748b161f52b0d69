// y[o, i] = reduce_r x[o, r, i] (sum/mean/max/min/prod) for strided reductions (inner > 1, reduce_dim > 64).
// Workgroup 16x16 per (o, 16 columns): lid.x = column (coalesced reads), lid.y splits r; tree over lid.y.
// Bindings: 0 = arena window, 1 = ReduceTileParams (groups = outer * tiles; chunking as in reduce_tree).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "reduce_combine.wgsl"

var<workgroup> partial: array<f32, 256>;  // [16 r-lanes][16 columns]

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    let o = group / p.tiles;
    let i = (group % p.tiles) * 16u + lid.x;
    var acc: f32 = {{IDENTITY}};
    if (i < p.inner) {
        let base = p.x + (o * p.reduce_dim + p.start) * p.inner + i;
        for (var r = lid.y; r < p.count; r = r + 16u) {
            acc = combine(acc, ld_f32(base + r * p.inner));
        }
    }
    let slot = lid.y * 16u + lid.x;
    partial[slot] = acc;
    workgroupBarrier();
    for (var stride = 8u; stride > 0u; stride = stride / 2u) {
        if (lid.y < stride) {
            partial[slot] = combine(partial[slot], partial[slot + stride * 16u]);
        }
        workgroupBarrier();
    }
    if (lid.y == 0u && i < p.inner) {
        var total = partial[lid.x];
        if (p.accumulate == 1u) {
            total = combine(ld_f32(p.y + o * p.inner + i), total);
        }
        st_f32(p.y + o * p.inner + i, total / p.divisor);
    }
}

// y[row, rank(c)] = c when rank(c) < k; rank(c) = #elements ranked before x[row, c] (NaN largest, ties ->
// smaller index): TopK for large k. One workgroup per {{WG}} elements of a row; the row streams through
// workgroup memory in tiles. Bindings: 0 = arena window, 1 = ReduceRankParams (groups = rows * tiles).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ReduceRankParams;

{{PRELUDE}}

var<workgroup> tile: array<f32, {{WG}}>;

#include "reduce_order.wgsl"

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    let lane = lid.x;
    let row = group / p.tiles;
    let c = (group % p.tiles) * {{WG}}u + lane;
    let base = p.x + row * p.cols;
    var value: f32 = 0.0;
    if (c < p.cols) {
        value = ld_f32(base + c);
    }
    var rank = 0u;
    for (var start = 0u; start < p.cols; start = start + {{WG}}u) {
        if (start + lane < p.cols) {
            tile[lane] = ld_f32(base + start + lane);
        }
        workgroupBarrier();
        let count = min({{WG}}u, p.cols - start);
        for (var j = 0u; j < count; j = j + 1u) {
            if (ranks_before(tile[j], start + j, value, c)) {
                rank = rank + 1u;
            }
        }
        workgroupBarrier();
    }
    if (c < p.cols && rank < p.k) {
        st_i32(p.y + row * p.k + rank, i32(c));
    }
}

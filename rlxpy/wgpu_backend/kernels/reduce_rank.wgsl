// y[row, rank(c)] = c when rank(c) < k; rank(c) = #elements ranked before x[row, c] (NaN largest, ties ->
// smaller index): TopK for large k. One workgroup per {{WG}} elements of a row; the row streams through
// workgroup memory in tiles. Bindings: 0 = arena window, 1 = ReduceRankParams (groups = rows * tiles).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "reduce_order.wgsl"
#include "common_entry_rows.wgsl"

var<workgroup> tile: array<f32, {{WG}}>;

fn run_row(group: u32, lane: u32) {
    if (group >= p.groups) {
        return;
    }
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

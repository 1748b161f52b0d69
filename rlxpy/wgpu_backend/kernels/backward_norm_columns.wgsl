// d gamma / d beta of LayerNorm and RmsNorm: column sums over the rows of dy * (x - mean) * inv [GAMMA] or
// dy [beta], in two phases. Phase 0: workgroup (column block, row chunk) sums its chunk's rows into
// partial[chunk, col] (or straight into y when there is one chunk); phase 1: y[col] = sum over chunks.
// Row statistics (mean, inv) come from backward_norm_stats in scratch. Lanes: x = 64 columns, y = 4 rows.
// Bindings: 0 = arena window (u32 words), 1 = BackwardNormColumnsParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

var<workgroup> lanes: array<f32, 256>;

@compute @workgroup_size(64, 4, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let col = wid.x * 64u + lid.x;
    let in_range = col < p.cols;
    if (p.phase == 1u) {  // one lane row per column: the chunks in order
        if (in_range && lid.y == 0u) {
            var total = 0.0;
            for (var k = 0u; k < p.chunks; k = k + 1u) {
                total = total + ld_f32(p.partial + k * p.cols + col);
            }
            st_f32(p.y + col, total);
        }
        return;
    }
    let first = wid.y * p.chunk_rows;
    let last = min(first + p.chunk_rows, p.rows);
    var acc = 0.0;
    if (in_range) {
        for (var r = first + lid.y; r < last; r = r + 4u) {
            var v = ld_f32(p.dy + r * p.cols + col);
            if (p.gamma == 1u) {
                v = v * (ld_f32(p.x + r * p.cols + col) - ld_f32(p.stats + 2u * r)) * ld_f32(p.stats + 2u * r + 1u);
            }
            acc = acc + v;
        }
    }
    lanes[lid.y * 64u + lid.x] = acc;
    workgroupBarrier();
    if (in_range && lid.y == 0u) {
        let total = ((lanes[lid.x] + lanes[64u + lid.x]) + lanes[128u + lid.x]) + lanes[192u + lid.x];
        st_f32(select(p.partial + wid.y * p.cols + col, p.y + col, p.chunks == 1u), total);
    }
}

// Grouped matmul for few rows (decode: a tile holds a handful of rows, the weight read dominates),
// over the routing pass's tile table: workgroup (64-column block x, tile y) computes
// y[r] = x[r] @ w[expert] for its tile's <= ROWS rows (gathered through perm). Lane (tx, ty) streams
// the weight rows k = 4 (ty + 16 j) .. + 3 of columns col0 + 4 tx .. + 3 (16 lanes read a row's 64
// columns side by side; 4 row loads in flight per lane) and keeps one partial sum per tile row, which
// the 16 k groups then add in workgroup memory, row after row. Tiles past the table's count return at
// once, the out-of-range bucket writes zero rows. The arena access is matmul_tiled's
// (include/matmul_access_*: vec4 words where x, w, y, K and N sit on 4-element boundaries).
// Bindings: 0 = arena window, 1 = MatmulGroupedRowsParams.
#include "matmul_access_{{ACCESS}}.wgsl"
#include "matmul_y_index.wgsl"

const BM: u32 = 64u;  // the routing pass's tile rows; a tile here holds at most ROWS
const ROWS: u32 = {{ROWS}}u;
const SLOTS: u32 = BM;
#include "matmul_grouped_tile.wgsl"

var<workgroup> part: array<vec4<f32>, 256>;  // one row's partial sums: k group ty, column quad tx

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let task = grouped_tile(lane, wid.y);
    let count = task.z;
    if (count == 0u) {
        return;
    }
    let tx = lane % 16u;
    let ty = lane / 16u;
    let col = wid.x * 64u + 4u * tx;
    var acc: array<vec4<f32>, ROWS>;
{{ROW_IDS}}
    if (task.x < p.experts) {
        let w = p.w + task.x * p.k * p.n;
        for (var k4 = 4u * ty; k4 < p.k; k4 = k4 + 64u) {
            let w0 = load_w(w, k4, col);
            let w1 = load_w(w, k4 + 1u, col);
            let w2 = load_w(w, k4 + 2u, col);
            let w3 = load_w(w, k4 + 3u, col);
{{ROW_SUMS}}
        }
    }
{{ROW_STORES}}
}

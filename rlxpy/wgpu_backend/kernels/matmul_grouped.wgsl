// Grouped matmul over the routing pass's tile table: workgroup (column block x, tile y) computes
// y[r] = x[r] @ w[expert] for the <= BM rows r of its tile (gathered through perm) and BN columns, with
// the register-tiled core (include/matmul_register_tiles); tiles past the table's count return at once,
// the out-of-range bucket writes zero rows. The arena access is matmul_tiled's (include/matmul_access_*:
// vec4 words where x, w, y, K and N sit on 4-element boundaries), with m = the rows of x.
// Bindings: 0 = arena window, 1 = MatmulGroupedParams.
#include "matmul_access_{{ACCESS}}.wgsl"
#include "matmul_y_index.wgsl"

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const SLOTS: u32 = BM;
#include "matmul_register_tiles.wgsl"
#include "matmul_grouped_tile.wgsl"

var<private> tile_rows: u32;
var<private> expert_w: u32;  // the expert's weight matrix

fn rt_load_a(r: u32, k: u32) -> vec4<f32> {
    var row = p.m;  // a slot past the tile's rows loads zeros
    if (r < tile_rows) {
        row = rows[r];
    }
    return load_a(p.x, row, k);
}

fn rt_load_w(k: u32, c: u32) -> vec4<f32> {
    return load_w(expert_w, k, c);
}

fn put(r: u32, col: u32, v: vec4<f32>) {
    if (r < tile_rows && col < p.n) {
        store_y(p.y, rows[r], col, v);
    }
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let task = grouped_tile(lane, wid.{{TILE_AXIS}});
    if (task.z == 0u) {
        return;
    }
    tile_rows = task.z;
    let tx = lane % 16u;
    let ty = lane / 16u;
    let col0 = wid.{{BLOCK_AXIS}} * BN;
    var acc = array<vec4<f32>, {{RT_ACC}}>();
    if (task.x < p.experts) {  // else the out-of-range bucket: zero rows
        expert_w = p.w + task.x * p.k * p.n;
        acc = rt_sums(lane, tx, ty, col0, p.k);
    }
{{RT_STORE}}
}

// Grouped matmul over the routing pass's tile table: workgroup (column block x, tile y) computes
// y[r] = x[r] @ w[expert] for the <= BM rows r of its tile (gathered through perm: each thread looks its
// x row up once) and BN columns, register-tiled (include/matmul_register_tiles, the K loop and the
// stores written out by lowering/matmul_core); tiles past the
// table's count return at once, the out-of-range bucket writes zero rows. The arena access is matmul_tiled's (include/matmul_access_*:
// vec4 words where x, w, y, K and N sit on 4-element boundaries), with m = the rows of x.
// Bindings: 0 = arena window, 1 = MatmulGroupedParams.
#include "matmul_access_{{ACCESS}}.wgsl"
#include "matmul_y_index.wgsl"

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const SLOTS: u32 = BM;
#include "matmul_register_tiles.wgsl"
#include "matmul_grouped_tile.wgsl"

fn put(r: u32, col: u32, v: vec4<f32>) {
    if (r < job.z && col < p.n) {
        store_y(p.y, rows[r], col, v);
    }
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let task = grouped_tile(lane, wid.y);
    if (task.z == 0u) {
        return;
    }
    let tx = lane % 16u;
    let ty = lane / 16u;
    let col0 = wid.x * BN;
{{RT_ACC}}
    if (task.x < p.experts) {  // else the out-of-range bucket: zero rows
        let w = p.w + task.x * p.k * p.n;
        let s = rt_share(lane);
        var row = p.m;  // the x row this thread loads: a slot past the tile's rows loads zeros
        if (s.ar < task.z) {
            row = rows[s.ar];
        }
        var va = vec4<f32>();
        var vw = vec4<f32>();
        if (s.loads_a) {
            va = load_a(p.x, row, s.ak);
        }
        if (s.loads_w) {
            vw = load_w(w, s.wk, col0 + s.wc);
        }
        rt_put(0u, s, va, vw);
        workgroupBarrier();
        let steps = (p.k + RT_K - 1u) / RT_K;
{{RT_LOOP}}
    }
{{RT_STORE}}
}

// Grouped matmul for few rows (every tile holds <= ROWS of them: decode): memory-bound, so each
// workgroup streams its expert's weight once for 64 columns with many loads in flight. Workgroup
// (column block x, tile y): 16 lanes of 4 adjacent columns (vec4) x 16 slices of K; per chunk of KC
// k, a slice loads its KC / 16 weight rows (k = slice, slice + 16, ...) at once, then sums them for
// all ROWS rows (rows past the tile's count are zero in the staged x); at the end the 16 slices are
// added in order per row.
// x is staged in workgroup memory KC columns of K at a time. Tiles past the table's count return at
// once, the out-of-range bucket writes zero rows. Arena access as matmul_grouped's.
// Bindings: 0 = arena window, 1 = MatmulGroupedParams.
#include "matmul_access_{{ACCESS}}.wgsl"
#include "matmul_y_index.wgsl"

const ROWS: u32 = {{ROWS}}u;
const SLOTS: u32 = ROWS;
const QUADS: u32 = 16u;  // lanes along the columns: 64 columns a workgroup
const SLICES: u32 = 16u;  // lanes along K
const KC: u32 = 128u;  // K per staged chunk of x
#include "matmul_grouped_tile.wgsl"

var<workgroup> xs: array<vec4<f32>, ROWS * KC / 4u>;  // [ROWS][KC / 4]: x's rows, zero past the tile
var<workgroup> partial: array<vec4<f32>, 256>;  // [SLICES][QUADS]: one row's sums of every slice

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let task = grouped_tile(lane, wid.y);
    if (task.z == 0u) {
        return;
    }
    let quad = lane % QUADS;
    let slice = lane / QUADS;
    let col = wid.x * 4u * QUADS + 4u * quad;
    var acc: array<vec4<f32>, ROWS>;
    if (task.x < p.experts) {  // else the out-of-range bucket: zero rows
        let w = p.w + task.x * p.k * p.n;
        for (var k0 = 0u; k0 < p.k; k0 = k0 + KC) {
            // this slice's weight rows of the chunk first: KC / SLICES loads in flight per lane, their
            // latency hidden behind the staging of x
            let steps = min(KC, p.k - k0);
            var wv: array<vec4<f32>, KC / SLICES>;
            for (var j = 0u; j < KC / SLICES; j = j + 1u) {
                wv[j] = load_w(w, select(p.k, k0 + slice + SLICES * j, slice + SLICES * j < steps), col);
            }
            for (var e = lane; e < ROWS * KC / 4u; e = e + 256u) {
                let r = e / (KC / 4u);
                var row = p.m;  // zeros past the tile's rows
                if (r < task.z) {
                    row = rows[r];
                }
                xs[e] = load_a(p.x, row, k0 + 4u * (e % (KC / 4u)));
            }
            workgroupBarrier();
            for (var j = 0u; j < KC / SLICES; j = j + 1u) {
                let kk = slice + SLICES * j;
                for (var r = 0u; r < ROWS; r = r + 1u) {
                    acc[r] = acc[r] + xs[r * (KC / 4u) + kk / 4u][kk % 4u] * wv[j];
                }
            }
            workgroupBarrier();
        }
    }
    for (var r = 0u; r < ROWS; r = r + 1u) {
        partial[lane] = acc[r];
        workgroupBarrier();
        if (slice == 0u && r < task.z && col < p.n) {
            var sum = partial[quad];
            for (var s = 1u; s < SLICES; s = s + 1u) {
                sum = sum + partial[s * QUADS + quad];
            }
            store_y(p.y, rows[r], col, sum);
        }
        workgroupBarrier();
    }
}

// Grouped matmul for few rows (decode: every tile holds a handful, the weight read dominates), over
// the routing pass's tile table: workgroup (64-column block x, tile y) computes y[r] = x[r] @ w[expert]
// for its tile's rows (gathered through perm). 16 x 16 lanes, each 4 adjacent rows x 4 adjacent
// columns; per step of BK = 16 k every lane issues its 4 weight loads (and its x loads for rows in the
// tile) before one barrier, so 4 loads per lane are in flight; lanes whose rows are all past the
// tile's count skip the sums. Tiles past the table's count return at once, the out-of-range bucket
// writes zero rows. (Measured on an H200 at 8 experts x 8 rows x 2048 x 8192: 0.42 ms, against
// 0.58-0.69 ms for the register-tiled kernel and 0.80 ms for a K-sliced streaming kernel.)
// Bindings: 0 = arena window (words), 1 = MatmulGroupedRowsParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const SLOTS: u32 = BM;
#include "matmul_grouped_tile.wgsl"

var<workgroup> tile_x: array<vec4<f32>, 256>;  // [BK][BM / 4]
var<workgroup> tile_w: array<vec4<f32>, 256>;  // [BK][BN / 4]

// Stages element e of the x tile and of the w tile (each 1024 elements, 4 per lane).
fn stage(e: u32, k0: u32, col0: u32, count: u32, w: u32) {
    let m = e / BK;  // x tile: neighbouring lanes read neighbouring k of one row
    let kx = k0 + e % BK;
    var vx = 0.0;
    if (m < count && kx < p.k) {
        vx = ld_f32(p.x + rows[m] * p.k + kx);
    }
    let at = (e % BK) * BM + m;
    tile_x[at / 4u][at % 4u] = vx;
    let kw = k0 + e / BN;  // w tile: neighbouring lanes read neighbouring columns
    let cw = col0 + e % BN;
    var vw = 0.0;
    if (kw < p.k && cw < p.n) {
        vw = ld_f32(w + kw * p.n + cw);
    }
    tile_w[e / 4u][e % 4u] = vw;
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let task = grouped_tile(lane, wid.y);
    let count = task.z;
    if (count == 0u) {
        return;
    }
    let tx = lane % 16u;
    let ty = lane / 16u;
    let col0 = wid.x * BN;
    var acc: array<vec4<f32>, 4>;  // rows 4 ty + r, columns col0 + 4 tx .. + 3
    if (task.x < p.experts) {
        let w = p.w + task.x * p.k * p.n;
        for (var k0 = 0u; k0 < p.k; k0 = k0 + BK) {
            stage(lane, k0, col0, count, w);
            stage(lane + 256u, k0, col0, count, w);
            stage(lane + 512u, k0, col0, count, w);
            stage(lane + 768u, k0, col0, count, w);
            workgroupBarrier();
            if (4u * ty < count) {
                for (var kk = 0u; kk < BK; kk = kk + 1u) {
                    let wv = tile_w[kk * (BN / 4u) + tx];
                    let xv = tile_x[kk * (BM / 4u) + ty];
                    acc[0] = acc[0] + xv.x * wv;
                    acc[1] = acc[1] + xv.y * wv;
                    acc[2] = acc[2] + xv.z * wv;
                    acc[3] = acc[3] + xv.w * wv;
                }
            }
            workgroupBarrier();
        }
    }
    for (var r = 0u; r < 4u; r = r + 1u) {
        let m = 4u * ty + r;
        if (m < count) {
            for (var c = 0u; c < 4u; c = c + 1u) {
                let col = col0 + 4u * tx + c;
                if (col < p.n) {
                    st_f32(p.y + rows[m] * p.n + col, acc[r][c]);
                }
            }
        }
    }
}

// Grouped matmul over the routing pass's tile table: workgroup (column tile x, tile y) computes
// y[r] = x[r] @ w[expert] for the <= BM rows r of its tile (gathered through perm) and BN columns;
// tiles past the table's count return at once, the out-of-range bucket writes zero rows. 16 x 16
// lanes, each 4 adjacent rows x 4 adjacent columns; the x and w tiles of BK steps of K sit in workgroup
// memory as vec4s, so one step of a lane's sums reads two vec4s for its 16 FMAs.
// Bindings: 0 = arena window, 1 = MatmulGroupedParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
var<workgroup> tile_x: array<vec4<f32>, 256>;  // [BK][BM / 4]
var<workgroup> tile_w: array<vec4<f32>, 256>;  // [BK][BN / 4]
var<workgroup> rows: array<u32, BM>;
var<workgroup> job: vec3<u32>;  // (expert, first position in perm, rows)

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
    if (lane == 0u) {
        var found = vec3<u32>(0u, 0u, 0u);
        if (wid.y < ld_u32(p.table)) {
            let entry = p.table + 1u + 3u * wid.y;
            found = vec3<u32>(ld_u32(entry), ld_u32(entry + 1u), ld_u32(entry + 2u));
        }
        job = found;
    }
    let task = workgroupUniformLoad(&job);
    let count = task.z;
    if (count == 0u) {
        return;
    }
    if (lane < count) {
        rows[lane] = ld_u32(p.perm + task.y + lane);
    }
    workgroupBarrier();
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
            if (4u * ty < count) {  // lanes whose rows are all past the tile's last skip the sums
                for (var kk = 0u; kk < BK; kk = kk + 1u) {
                    let wv = tile_w[kk * (BN / 4u) + tx];
                    let xv = tile_x[kk * (BM / 4u) + ty];
                    // unrolled: lavapipe counts every loop iteration against its per-invocation limit
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

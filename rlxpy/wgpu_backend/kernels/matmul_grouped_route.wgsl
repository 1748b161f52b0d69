// Routing pass of the grouped matmul (one workgroup): counts the rows of each expert (bucket `experts`
// = rows with an out-of-range id), lays the experts' rows out one after another in `perm` (row ids by
// expert; the order inside an expert does not change any output) and writes the tile tables the GEMMs
// run over: word 0 = the number of tiles, then per tile (expert, first position in perm, rows).
// Each bucket's rows go in tiles of BM; with BMS < BM (two tables) a last part of at most BMS rows goes
// to the second table at word p.rest instead, for the GEMM on BMS-row tiles (a 128-row tile holding a
// few rows costs a full one).
// Bindings: 0 = arena window, 1 = MatmulGroupedRouteParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "matmul_expert_index.wgsl"
#include "common_workgroup_scan.wgsl"

const BUCKETS: u32 = {{BUCKETS}}u;
const BM: u32 = {{BM}}u;
const BMS: u32 = {{BMS}}u;
const WG: u32 = {{WG}}u;
var<workgroup> counts: array<atomic<u32>, BUCKETS>;
var<workgroup> starts: array<u32, BUCKETS>;
var<workgroup> scan: array<vec3<u32>, WG>;  // (rows, tiles, second-table tiles) of each lane's buckets

// (BM-row tiles, BMS-row tiles) of a bucket of c rows
fn tiles(c: u32) -> vec2<u32> {
    let part = c % BM;
    if (BMS == BM || part == 0u || part > BMS) {
        return vec2<u32>((c + BM - 1u) / BM, 0u);
    }
    return vec2<u32>(c / BM, 1u);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32) {
    for (var e = lane; e < BUCKETS; e = e + WG) {
        atomicStore(&counts[e], 0u);
    }
    workgroupBarrier();
    for (var i = lane; i < p.rows; i = i + WG) {
        atomicAdd(&counts[expert_of(i)], 1u);
    }
    workgroupBarrier();
    let per = (BUCKETS + WG - 1u) / WG;  // each lane owns buckets [lane * per, lane * per + per)
    var sum = vec3<u32>(0u, 0u, 0u);
    for (var j = 0u; j < per; j = j + 1u) {
        let e = lane * per + j;
        if (e < BUCKETS) {
            let c = atomicLoad(&counts[e]);
            sum = sum + vec3<u32>(c, tiles(c));
        }
    }
    scan[lane] = sum;
    scan_inclusive(lane);
    var at = vec3<u32>(0u, 0u, 0u);
    if (lane > 0u) {
        at = scan[lane - 1u];
    }
    for (var j = 0u; j < per; j = j + 1u) {
        let e = lane * per + j;
        if (e < BUCKETS) {
            let c = atomicLoad(&counts[e]);
            let n = tiles(c);
            starts[e] = at.x;
            for (var t = 0u; t < n.x; t = t + 1u) {
                let entry = p.table + 1u + 3u * (at.y + t);
                st_u32(entry, e);
                st_u32(entry + 1u, at.x + t * BM);
                st_u32(entry + 2u, min(BM, c - t * BM));
            }
            if (n.y == 1u) {
                let entry = p.rest + 1u + 3u * at.z;
                st_u32(entry, e);
                st_u32(entry + 1u, at.x + n.x * BM);
                st_u32(entry + 2u, c - n.x * BM);
            }
            at = at + vec3<u32>(c, n);
        }
    }
    if (lane == WG - 1u) {
        st_u32(p.table, scan[lane].y);
        if (BMS != BM) {
            st_u32(p.rest, scan[lane].z);
        }
    }
    workgroupBarrier();
    for (var e = lane; e < BUCKETS; e = e + WG) {
        atomicStore(&counts[e], 0u);
    }
    workgroupBarrier();
    for (var i = lane; i < p.rows; i = i + WG) {
        let e = expert_of(i);
        st_u32(p.perm + starts[e] + atomicAdd(&counts[e], 1u), i);
    }
}

// Routing pass of the grouped matmul (one workgroup): counts the rows of each expert (bucket `experts`
// = rows with an out-of-range id), lays the experts' rows out one after another in `perm` (row ids by
// expert; the order inside an expert does not change any output) and writes the tile table the GEMM
// runs over: word 0 = the number of tiles, then per tile (expert, first position in perm, rows <= BM).
// Bindings: 0 = arena window, 1 = MatmulGroupedRouteParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "matmul_expert_index.wgsl"
#include "common_workgroup_scan.wgsl"

const BUCKETS: u32 = {{BUCKETS}}u;
const BM: u32 = {{BM}}u;
const WG: u32 = {{WG}}u;
var<workgroup> counts: array<atomic<u32>, BUCKETS>;
var<workgroup> starts: array<u32, BUCKETS>;
var<workgroup> scan: array<vec2<u32>, WG>;  // (rows, tiles) of each lane's block of buckets

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
    var sum = vec2<u32>(0u, 0u);
    for (var j = 0u; j < per; j = j + 1u) {
        let e = lane * per + j;
        if (e < BUCKETS) {
            let c = atomicLoad(&counts[e]);
            sum = sum + vec2<u32>(c, (c + BM - 1u) / BM);
        }
    }
    scan[lane] = sum;
    scan_inclusive(lane);
    var at = vec2<u32>(0u, 0u);
    if (lane > 0u) {
        at = scan[lane - 1u];
    }
    for (var j = 0u; j < per; j = j + 1u) {
        let e = lane * per + j;
        if (e < BUCKETS) {
            let c = atomicLoad(&counts[e]);
            starts[e] = at.x;
            for (var t = 0u; t * BM < c; t = t + 1u) {
                let entry = p.table + 1u + 3u * (at.y + t);
                st_u32(entry, e);
                st_u32(entry + 1u, at.x + t * BM);
                st_u32(entry + 2u, min(BM, c - t * BM));
            }
            at = at + vec2<u32>(c, (c + BM - 1u) / BM);
        }
    }
    if (lane == WG - 1u) {
        st_u32(p.table, scan[lane].y);
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

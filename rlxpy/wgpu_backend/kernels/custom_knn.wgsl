// umap.knn: for row r of the pairwise distances [n, n], the k smallest finite distances off the
// diagonal in ascending order, ties -> lower column; out[r] = their k columns (as f32), then the k
// distances; slots past the qualifying columns hold column n and +inf. NaN and +-inf never qualify.
// One workgroup of {{WG}} lanes per row: each lane keeps the K best of its columns (lane, lane + WG,
// ...) sorted in registers, then K rounds of a workgroup tree take the best remaining head.
// Bindings: 0 = arena window, 1 = CustomKnnParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_float.wgsl"
#include "common_entry_rows.wgsl"
#include "common_pick.wgsl"

const K: u32 = {{K}}u;

var<workgroup> head_lane: array<u32, {{WG}}>;

// (v1, i1) ranks before (v2, i2): smaller distance, then lower column
fn pick_order(v1: f32, i1: u32, v2: f32, i2: u32) -> bool {
    return v1 < v2 || (v1 == v2 && i1 < i2);
}

fn tree_merge(tree: u32, a: u32, b: u32) {
    if (pick_merge(a, b)) {
        head_lane[a] = head_lane[b];
    }
}

fn run_row(row: u32, lane: u32) {
    if (row >= p.n) {
        return;
    }
    var value: array<f32, K>;
    var index: array<u32, K>;
    var count = 0u;
    let base = p.x + row * p.n;
    for (var c = lane; c < p.n; c = c + {{WG}}u) {
        let v = ld_f32(base + c);
        let finite = (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;  // by bits: NaN, +-inf are not
        if (finite && c != row && (count < K || v < value[K - 1u])) {
            // columns arrive in increasing order: an equal distance already held keeps its place
            var j = min(count, K - 1u);
            loop {
                if (j == 0u || value[j - 1u] <= v) {
                    break;
                }
                value[j] = value[j - 1u];
                index[j] = index[j - 1u];
                j = j - 1u;
            }
            value[j] = v;
            index[j] = c;
            count = min(count + 1u, K);
        }
    }
    var taken = 0u;
    let out = p.y + row * 2u * K;
    for (var round = 0u; round < K; round = round + 1u) {
        var v = 0.0;
        var i = NONE;
        if (taken < count) {
            v = value[taken];
            i = index[taken];
        }
        pick_value[lane] = v;
        pick_index[lane] = i;
        head_lane[lane] = lane;
        tree_reduce(lane, 0u);
        let winner = pick_index[0];
        if (winner != NONE && head_lane[0] == lane) {
            taken = taken + 1u;
        }
        if (lane == 0u) {
            st_f32(out + round, select(f32(winner), f32(p.n), winner == NONE));
            st_f32(out + K + round, select(pick_value[0], inf_f32(), winner == NONE));
        }
        workgroupBarrier();  // every lane has read slot 0 before the next round overwrites it
    }
}

// The sums over channels and batches of SelectiveScanBackward for the group of batches b0 .. b0 + group,
// after backward_scan_selective stored their lam and h [lb][t][c][n] and dA partials [lb][c][n]: item
// i < group*S*N is (the group's row (lb, t), state n), of the global row bt = (b0 + lb, t):
//   dBm[bt, n] = sum_c lam[lb, t, c, n] delta[bt, c] x[bt, c],  dCm[bt, n] = sum_c dy[bt, c] h[lb, t, c, n];
// the next Hd*N items add sum_lb partial[lb, c, n] to dA[c, n] (written by the first group, b0 = 0).
// Channels and batches are added in order.
// Bindings: 0 = arena window, 1 = BackwardScanSelectiveParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

const N: u32 = {{N}}u;

fn run_item(i: u32) {
    let rows = p.batch * p.steps;
    let local_rows = p.group * p.steps;
    let da_out = p.out + 2u * rows * p.channels;
    let dbm_out = da_out + p.channels * N;
    if (i < local_rows * N) {
        let local = i / N;
        let n = i % N;
        let bt = p.b0 * p.steps + local;
        var dbm = 0.0;
        var dcm = 0.0;
        for (var c = 0u; c < p.channels; c = c + 1u) {
            let at = bt * p.channels + c;
            let state = (local * p.channels + c) * N + n;
            dbm = dbm + ld_f32(p.lam + state) * ld_f32(p.delta + at) * ld_f32(p.x + at);
            dcm = dcm + ld_f32(p.dy + at) * ld_f32(p.hs + state);
        }
        st_f32(dbm_out + bt * N + n, dbm);
        st_f32(dbm_out + rows * N + bt * N + n, dcm);
        return;
    }
    let j = i - local_rows * N;
    if (j >= p.channels * N) {
        return;
    }
    var da = 0.0;
    if (p.b0 > 0u) {
        da = ld_f32(da_out + j);
    }
    for (var lb = 0u; lb < p.group; lb = lb + 1u) {
        da = da + ld_f32(p.parts + lb * p.channels * N + j);
    }
    st_f32(da_out + j, da);
}

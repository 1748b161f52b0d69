// The sums over channels and batches of SelectiveScanBackward, after backward_scan_selective stored
// lam and h [b][t][c][n] and the dA partials [b][c][n]: item i < B*S*N is (row bt = (b, t), state n):
//   dBm[bt, n] = sum_c lam[bt, c, n] delta[bt, c] x[bt, c],  dCm[bt, n] = sum_c dy[bt, c] h[bt, c, n];
// the next Hd*N items are dA[c, n] = sum_b partial[b, c, n]. Channels and batches are added in order.
// Bindings: 0 = arena window, 1 = BackwardScanSelectiveParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

const N: u32 = {{N}}u;

fn run_item(i: u32) {
    let rows = p.batch * p.steps;
    let planes = rows * p.channels;
    let da_out = p.out + 2u * planes;
    let dbm_out = da_out + p.channels * N;
    if (i < rows * N) {
        let bt = i / N;
        let n = i % N;
        var dbm = 0.0;
        var dcm = 0.0;
        for (var c = 0u; c < p.channels; c = c + 1u) {
            let at = bt * p.channels + c;
            dbm = dbm + ld_f32(p.lam + at * N + n) * ld_f32(p.delta + at) * ld_f32(p.x + at);
            dcm = dcm + ld_f32(p.dy + at) * ld_f32(p.hs + at * N + n);
        }
        st_f32(dbm_out + i, dbm);
        st_f32(dbm_out + rows * N + i, dcm);
        return;
    }
    let j = i - rows * N;
    if (j >= p.channels * N) {
        return;
    }
    var da = 0.0;
    for (var b = 0u; b < p.batch; b = b + 1u) {
        da = da + ld_f32(p.parts + b * p.channels * N + j);
    }
    st_f32(da_out + j, da);
}

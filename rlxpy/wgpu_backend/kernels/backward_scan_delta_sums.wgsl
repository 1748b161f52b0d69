// GatedDeltaNetBackward's sums over the state columns j, one invocation per (b, t, h, i):
// dq = c sum_j S_t[i, j] dy_t[j]; dk = sum_j G_t[i, j] d_t[j] + exp(g_t) S_{t-1}[i, j] u_t[j]; and at
// i = 0 dg and dbeta, the sums of the columns' partials. Bindings: 0 = arena window, 1 = BackwardScanDeltaParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const N: u32 = {{N}}u;

#include "backward_scan_delta_layout.wgsl"
#include "common_entry_items.wgsl"

fn run_item(item: u32) {
    if (item >= p.total) {
        return;
    }
    let i = item % N;
    let gate = item / N;
    let h = gate % p.heads;
    let t = (gate / p.heads) % p.steps;
    let bh = (gate / (p.heads * p.steps)) * p.heads + h;
    let decay = exp(ld_f32(p.g + gate));
    var dq = 0.0;
    var dk = 0.0;
    var dg = 0.0;
    var dbeta = 0.0;
    for (var j = 0u; j < N; j = j + 1u) {
        dq = dq + ld_f32(state_at(bh, t + 1u, i, j)) * ld_f32(p.dy + gate * N + j);
        dk = dk + ld_f32(adj_at(bh, t, i, j)) * ld_f32(column_at(p.dvec, bh, t, j))
            + decay * ld_f32(state_at(bh, t, i, j)) * ld_f32(column_at(p.drvec, bh, t, j));
        if (i == 0u) {
            dg = dg + ld_f32(column_at(p.gpart, bh, t, j));
            dbeta = dbeta + ld_f32(column_at(p.bpart, bh, t, j));
        }
    }
    st_f32(p.out + item, p.scale * dq);
    st_f32(p.out + p.total + item, dk);
    if (i == 0u) {
        st_f32(p.out + 3u * p.total + gate, dg);
        st_f32(p.out + 3u * p.total + p.total / N + gate, dbeta);
    }
}

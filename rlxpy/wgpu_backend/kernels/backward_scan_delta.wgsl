// GatedDeltaNetBackward, f32, steps [start, start + count) of every (batch, head) and state column j,
// one invocation each (the columns of the state evolve independently). PHASE 0 recomputes the
// states forward from the one stored before `start` (0 at the first step), storing S_t, d_t and r_t;
// PHASE 1 walks the adjoint G = dL/dS (column j, in registers; from `carry` or 0 at the end) back:
// it stores G after this step's output term, writes dv, and stores u = -beta e and the dbeta and dg
// partials of the column for backward_scan_delta_sums. Bindings: 0 = arena window, 1 = BackwardScanDeltaParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const N: u32 = {{N}}u;
const PHASE: u32 = {{PHASE}}u;

#include "backward_scan_delta_layout.wgsl"
#include "common_entry_items.wgsl"

fn forward(bh: u32, j: u32) {
    let b = bh / p.heads;
    let h = bh % p.heads;
    var s: array<f32, N>;
    for (var i = 0u; i < N; i = i + 1u) {
        s[i] = 0.0;
        if (p.start == 0u) {
            st_f32(state_at(bh, 0u, i, j), 0.0);
        } else {
            s[i] = ld_f32(state_at(bh, p.start, i, j));
        }
    }
    for (var t = p.start; t < p.start + p.count; t = t + 1u) {
        let gate = gate_at(b, t, h);
        let decay = exp(ld_f32(p.g + gate));
        var recalled = 0.0;
        for (var i = 0u; i < N; i = i + 1u) {
            s[i] = s[i] * decay;
            recalled = recalled + s[i] * ld_f32(p.k + gate * N + i);
        }
        let d = (ld_f32(p.v + gate * N + j) - recalled) * ld_f32(p.beta + gate);
        for (var i = 0u; i < N; i = i + 1u) {
            s[i] = s[i] + ld_f32(p.k + gate * N + i) * d;
            st_f32(state_at(bh, t + 1u, i, j), s[i]);
        }
        st_f32(column_at(p.dvec, bh, t, j), d);
        st_f32(column_at(p.rvec, bh, t, j), recalled);
    }
}

fn reverse(bh: u32, j: u32) {
    let b = bh / p.heads;
    let h = bh % p.heads;
    let end = p.start + p.count;
    var a: array<f32, N>;  // G[:, j]
    for (var i = 0u; i < N; i = i + 1u) {
        a[i] = 0.0;
        if (end < p.steps) {
            a[i] = ld_f32(p.carry + (bh * N + i) * N + j);
        }
    }
    for (var t = end; t > p.start; t = t - 1u) {
        let u = t - 1u;
        let gate = gate_at(b, u, h);
        let dyj = ld_f32(p.dy + gate * N + j);
        var e = 0.0;
        for (var i = 0u; i < N; i = i + 1u) {
            a[i] = a[i] + p.scale * ld_f32(p.q + gate * N + i) * dyj;
            e = e + a[i] * ld_f32(p.k + gate * N + i);
        }
        let bt = ld_f32(p.beta + gate);
        st_f32(p.out + 2u * p.total + gate * N + j, bt * e);
        let residual = ld_f32(p.v + gate * N + j) - ld_f32(column_at(p.rvec, bh, u, j));
        st_f32(column_at(p.bpart, bh, u, j), e * residual);
        let du = -bt * e;
        st_f32(column_at(p.drvec, bh, u, j), du);
        let decay = exp(ld_f32(p.g + gate));
        var dg = 0.0;
        for (var i = 0u; i < N; i = i + 1u) {
            st_f32(adj_at(bh, u, i, j), a[i]);
            let before = decay * ld_f32(state_at(bh, u, i, j));
            let ds = a[i] + ld_f32(p.k + gate * N + i) * du;
            dg = dg + ds * before;
            a[i] = decay * ds;
        }
        st_f32(column_at(p.gpart, bh, u, j), dg);
    }
    for (var i = 0u; i < N; i = i + 1u) {
        st_f32(p.carry + (bh * N + i) * N + j, a[i]);
    }
}

fn run_item(item: u32) {
    if (item >= p.batch * p.heads * N) {
        return;
    }
    if (PHASE == 0u) {
        forward(item / N, item % N);
    } else {
        reverse(item / N, item % N);
    }
}

// Gradient of the selective scan (SelectiveScanBackward), per (channel c = workgroup x, batch
// b = b0 + lb, lb = workgroup y: its place in the group of batches this dispatch runs); lane n holds
// state n (lanes past N idle but share the barriers), over time steps [start, start + count):
// PHASE 0 (forward): recompute h_t = exp(dt A[c]) h[t-1] + dt x Bm[t] from h = 0, storing every h_t.
// PHASE 1 (reverse, dispatches from the last steps to the first): the adjoint
//   lam_t = Cm[t] dy[t, c] + exp(dt[t+1] A[c]) lam[t+1] (the second term carried in a register),
//   stored for backward_scan_selective_sums; dx and ddelta summed over n in workgroup memory per step;
//   dA's sum over t kept in a register and stored per (lb, c, n) for the sums kernel to add over batches.
// A later dispatch resumes from what the previous stored (h at start - 1; lam at t1 and the dA partial).
// Scratch (the group's batches): h and lam [lb][t][c][n]; dA partials [lb][c][n].
// Bindings: 0 = arena window, 1 = BackwardScanSelectiveParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const N: u32 = {{N}}u;
const PHASE: u32 = {{PHASE}}u;

var<workgroup> sums: array<vec2<f32>, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    sums[a] = sums[a] + sums[b];
}

#include "common_workgroup_tree.wgsl"

// word index of state n of (group batch lb, t, c) in the h / lam scratch
fn state_at(lb: u32, t: u32, c: u32, n: u32) -> u32 {
    return ((lb * p.steps + t) * p.channels + c) * N + n;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let n = lid.x;
    let c = wid.x;
    let lb = wid.y;
    let b = p.b0 + lb;
    let live = n < N;
    let nn = min(n, N - 1u);  // a valid index for idle lanes, whose values are discarded
    let a = ld_f32(p.a + c * N + nn);
    let t1 = p.start + p.count;
    if (PHASE == 0u) {
        var h = 0.0;
        if (p.start > 0u) {
            h = ld_f32(p.hs + state_at(lb, p.start - 1u, c, nn));
        }
        for (var t = p.start; t < t1; t = t + 1u) {
            let row = (b * p.steps + t) * p.channels + c;
            let dt = ld_f32(p.delta + row);
            h = exp(dt * a) * h + dt * ld_f32(p.x + row) * ld_f32(p.bm + (b * p.steps + t) * N + nn);
            if (live) {
                st_f32(p.hs + state_at(lb, t, c, n), h);
            }
        }
        return;
    }
    let part = p.parts + (lb * p.channels + c) * N + nn;
    var carry = 0.0;
    var da = 0.0;
    if (t1 < p.steps) {  // resume: lam at t1 and the partial stored by the previous dispatch
        let next = ld_f32(p.delta + (b * p.steps + t1) * p.channels + c);
        carry = exp(next * a) * ld_f32(p.lam + state_at(lb, t1, c, nn));
        da = ld_f32(part);
    }
    let planes = p.batch * p.steps * p.channels;  // dx, then ddelta, in the flat output
    for (var i = 0u; i < p.count; i = i + 1u) {
        let t = t1 - 1u - i;
        let row = (b * p.steps + t) * p.channels + c;
        let dt = ld_f32(p.delta + row);
        let xv = ld_f32(p.x + row);
        let bmn = ld_f32(p.bm + (b * p.steps + t) * N + nn);
        let e = exp(dt * a);
        let lam = ld_f32(p.cm + (b * p.steps + t) * N + nn) * ld_f32(p.dy + row) + carry;
        var prev = 0.0;
        if (t > 0u) {
            prev = ld_f32(p.hs + state_at(lb, t - 1u, c, nn));
        }
        if (live) {
            st_f32(p.lam + state_at(lb, t, c, n), lam);
            da = da + lam * dt * e * prev;
            sums[n] = vec2<f32>(lam * dt * bmn, lam * (a * e * prev + bmn * xv));
        } else {
            sums[n] = vec2<f32>(0.0);
        }
        tree_reduce(n, 0u);
        if (n == 0u) {  // only lane 0 reads slot 0; the next step's tree starts with a barrier
            st_f32(p.out + row, sums[0].x);
            st_f32(p.out + planes + row, sums[0].y);
        }
        carry = e * lam;
    }
    if (live) {
        st_f32(part, da);
    }
}

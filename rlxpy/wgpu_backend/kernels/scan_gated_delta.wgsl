// Gated delta rule, steps [start, start + count) of one (batch b, head h) per workgroup: lane j keeps
// column j of the state S[N, N] in registers, so each step is per-lane work with no reduction across
// lanes: S[:, j] *= exp(g_t); d = (v_t[j] - k_t . S[:, j]) * beta_t; S[:, j] += k_t * d;
// o_t[j] = scale * q_t . S[:, j]. The k and q rows of {{TT}} steps are staged in workgroup memory.
// The state starts from state[b, h] (load = 1) or 0, and is stored back there when store = 1 (the
// carried state, or scratch between dispatches of a sequence too long for one).
// Bindings: 0 = arena window, 1 = ScanGatedDeltaParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const N: u32 = {{N}}u;
const TT: u32 = {{TT}}u;
var<workgroup> kq: array<f32, 2u * TT * N>;  // k rows of TT steps, then their q rows

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) j: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let bh = wid.x;
    let b = bh / p.heads;
    let h = bh % p.heads;
    let column = p.state + bh * N * N + j;
    var s: array<f32, N>;
    for (var i = 0u; i < N; i = i + 1u) {
        s[i] = 0.0;
        if (p.load == 1u) {
            s[i] = ld_f32(column + i * N);
        }
    }
    let end = p.start + p.count;
    for (var t0 = p.start; t0 < end; t0 = t0 + TT) {
        let tt = min(TT, end - t0);
        for (var e = j; e < tt * N; e = e + {{WG}}u) {
            let at = ((b * p.steps + t0 + e / N) * p.heads + h) * N + e % N;
            kq[e] = ld_f32(p.k + at);
            kq[TT * N + e] = ld_f32(p.q + at);
        }
        workgroupBarrier();
        for (var u = 0u; u < tt; u = u + 1u) {
            let gate = (b * p.steps + t0 + u) * p.heads + h;
            let decay = exp(ld_f32(p.g + gate));
            var recalled = 0.0;
            for (var i = 0u; i < N; i = i + 1u) {
                s[i] = s[i] * decay;
                recalled = recalled + s[i] * kq[u * N + i];
            }
            let d = (ld_f32(p.v + gate * N + j) - recalled) * ld_f32(p.beta + gate);
            var out = 0.0;
            for (var i = 0u; i < N; i = i + 1u) {
                s[i] = s[i] + kq[u * N + i] * d;
                out = out + s[i] * kq[TT * N + u * N + i];
            }
            st_f32(p.o + gate * N + j, out * p.scale);
        }
        workgroupBarrier();  // every lane is done with this tile before the next overwrites it
    }
    if (p.store == 1u) {
        for (var i = 0u; i < N; i = i + 1u) {
            st_f32(column + i * N, s[i]);
        }
    }
}

// Mamba-1 selective scan over one time chunk per invocation: h = exp(dt * A[c]) * h + (dt * x) * Bm[t],
// y[t, c] = sum_n Cm[t, n] * h[n]. Invocation (channel c, chunk k = workgroup y, batch b = workgroup z)
// keeps the {{N}} states of (b, c) in registers; neighbouring lanes read neighbouring channels.
// PHASE 0 (whole): the sequence is one chunk; start from the carried state (has_state) or 0, write y,
//   and with has_state the final state.
// PHASE 1 (local): start from 0; store the chunk's end state and its decay (the product of its
//   exp(dt * A), so the carry pass multiplies exactly what the sequential recurrence would).
// PHASE 2 (output): start from the state entering the chunk (stored by the carry pass), write y.
// Scratch layout: carry and decay [chunk k][state n][batch b][channel c].
// Bindings: 0 = arena window, 1 = ScanSelectiveParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

const N: u32 = {{N}}u;
const PHASE: u32 = {{PHASE}}u;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let c = gid.x;
    if (c >= p.channels) {
        return;
    }
    let k = wid.y;
    let b = wid.z;
    let t0 = k * p.chunk;
    let t1 = min(t0 + p.chunk, p.steps);
    let lane = b * p.channels + c;
    let plane = p.batch * p.channels;  // scratch stride between states n
    let slot = k * N * plane + lane;
    var a: array<f32, N>;
    var h: array<f32, N>;
    var decay: array<f32, N>;
    for (var n = 0u; n < N; n = n + 1u) {
        a[n] = ld_f32(p.a + c * N + n);
        decay[n] = 1.0;
        var start = 0.0;
        if (PHASE == 0u && p.has_state == 1u) {
            start = ld_f32(p.state + lane * N + n);
        }
        if (PHASE == 2u) {
            start = ld_f32(p.carry + slot + n * plane);
        }
        h[n] = start;
    }
    for (var t = t0; t < t1; t = t + 1u) {
        let row = b * p.steps + t;
        let dt = ld_f32(p.delta + row * p.channels + c);
        let u = dt * ld_f32(p.x + row * p.channels + c);
        var acc = 0.0;
        for (var n = 0u; n < N; n = n + 1u) {
            let step_decay = exp(dt * a[n]);
            h[n] = step_decay * h[n] + u * ld_f32(p.bm + row * N + n);
            if (PHASE == 1u) {
                decay[n] = decay[n] * step_decay;
            } else {
                acc = acc + ld_f32(p.cm + row * N + n) * h[n];
            }
        }
        if (PHASE != 1u) {
            st_f32(p.y + row * p.channels + c, acc);
        }
    }
    if (PHASE == 1u) {
        for (var n = 0u; n < N; n = n + 1u) {
            st_f32(p.carry + slot + n * plane, h[n]);
            st_f32(p.decay + slot + n * plane, decay[n]);
        }
    }
    if (PHASE == 0u && p.has_state == 1u) {
        for (var n = 0u; n < N; n = n + 1u) {
            st_f32(p.state + lane * N + n, h[n]);
        }
    }
}

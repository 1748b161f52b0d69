// Chunked gated delta rule, pass 1: what one chunk of C steps of (batch b, head h) needs that does not
// depend on the state entering it. Workgroup (chunk x, b * heads + h y); lane = 4 t + r handles step t
// of the chunk against the earlier steps s = r, r + 4, ... With the log decay over (s, t]
// a(t, s) = g[s + 1] + ... + g[t] (summed directly, so a -inf gate zeroes what lies before it):
//   A[t, s] = beta_t exp(a(t, s)) (k_t . k_s) for s < t, in workgroup memory;
//   M[t, s] = exp(a(t, s)) (q_t . k_s) for s <= t, to the scratch record;
//   gamma[t] = exp(g[0] + ... + g[t]), tail[s] = exp(a(len - 1, s)), to the record;
// then T = (I + A)^-1 by forward substitution (row after row, lane c computing column c), written as
// T'[t, s] = T[t, s] beta_s. Only entries with s <= t are read or written: a NaN at step s reaches
// steps >= s only, as in the step-by-step rule.
// Bindings: 0 = arena window, 1 = ScanGatedDeltaChunkParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "scan_gated_delta_chunk.wgsl"

var<workgroup> tri: array<f32, C * C>;  // A, then T in place: row t, column s at t * C + s

fn dot_rows(a: u32, b: u32) -> f32 {
    var sum = 0.0;
    for (var i = 0u; i < p.n; i = i + 1u) {
        sum = sum + ld_f32(a + i) * ld_f32(b + i);
    }
    return sum;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let chunk = wid.x;
    let b = wid.y / p.heads;
    let h = wid.y % p.heads;
    let c0 = chunk * C;
    let len = min(C, p.steps - c0);
    let base = chunk_base(wid.y, chunk);
    let t = lane / 4u;
    if (t < len) {
        let at = step_index(b, c0 + t, h);
        let beta_t = ld_f32(p.beta + at);
        var log_decay = 0.0;  // a(t, s) for the current s
        for (var m = 0u; m <= t; m = m + 1u) {
            let s = t - m;
            if (m > 0u) {
                log_decay = log_decay + ld_f32(p.g + step_index(b, c0 + s + 1u, h));
            }
            if (s % 4u == lane % 4u) {
                let ks = p.k + step_index(b, c0 + s, h) * p.n;
                let decay = exp(log_decay);
                st_f32(base + C * C + t * C + s, decay * dot_rows(p.q + at * p.n, ks));
                if (s < t) {
                    tri[t * C + s] = beta_t * decay * dot_rows(p.k + at * p.n, ks);
                }
            }
        }
    }
    if (lane < len) {  // gamma[lane] and tail[lane]
        var upto = 0.0;
        var after = 0.0;
        for (var u = 0u; u < len; u = u + 1u) {
            let g = ld_f32(p.g + step_index(b, c0 + u, h));
            if (u <= lane) {
                upto = upto + g;
            } else {
                after = after + g;
            }
        }
        st_f32(base + 2u * C * C + lane, exp(upto));
        st_f32(base + 2u * C * C + C + lane, exp(after));
    }
    workgroupBarrier();
    for (var r = 1u; r < len; r = r + 1u) {  // T[r, c] = -(A[r, c] + sum_{c < s < r} A[r, s] T[s, c])
        var v = 0.0;
        if (lane < r) {
            v = tri[r * C + lane];
            for (var s = lane + 1u; s < r; s = s + 1u) {
                v = v + tri[r * C + s] * tri[s * C + lane];
            }
        }
        workgroupBarrier();
        if (lane < r) {
            tri[r * C + lane] = -v;
        }
        workgroupBarrier();
    }
    if (t < len) {
        for (var s = lane % 4u; s <= t; s = s + 4u) {
            var value = 1.0;
            if (s < t) {
                value = tri[t * C + s];
            }
            st_f32(base + t * C + s, value * ld_f32(p.beta + step_index(b, c0 + s, h)));
        }
    }
}

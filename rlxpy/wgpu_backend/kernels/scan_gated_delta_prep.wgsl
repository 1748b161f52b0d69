// Chunked gated delta rule, pass 1: what one chunk of C steps of (batch b, head h) needs that does not
// depend on the state entering it. Workgroup (chunk x, b * heads + h y); lane 16 bt + bs sums the
// 4 x 4 block of dot products of steps t = 4 bt .. + 3 with steps s = 4 bs .. + 3 (bs <= bt), the loads
// of one element i of 12 rows feeding 32 products. With the log decay over (s, t]
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

fn gate(b: u32, t: u32, h: u32) -> f32 {
    return ld_f32(p.g + step_index(b, t, h));
}

// Row e of the 4 rows from step `first`: its element i (zero past the chunk's len steps).
fn row4(base: u32, b: u32, first: u32, len: u32, h: u32, i: u32) -> vec4<f32> {
    var v = vec4<f32>();
    for (var e = 0u; e < 4u; e = e + 1u) {
        if (first + e < len) {
            v[e] = ld_f32(base + step_index(b, first + e, h) * p.n + i);
        }
    }
    return v;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let chunk = wid.x;
    let b = wid.y / p.heads;
    let h = wid.y % p.heads;
    let c0 = chunk * C;
    let len = min(C, p.steps - c0);
    let base = chunk_base(wid.y, chunk);
    // lane (bt, bs): the 4 x 4 block of steps t0 + a, s0 + e (a, e < 4); blocks above the diagonal idle
    let t0 = 4u * (lane / 16u);
    let s0 = 4u * (lane % 16u);
    if (s0 <= t0 && t0 < len) {
        var kk: array<vec4<f32>, 4>;  // kk[a][e] = k_{t0 + a} . k_{s0 + e}
        var qk: array<vec4<f32>, 4>;  // qk[a][e] = q_{t0 + a} . k_{s0 + e}
        for (var i = 0u; i < p.n; i = i + 1u) {
            let kt = row4(p.k, b, c0 + t0, c0 + len, h, i);
            let qt = row4(p.q, b, c0 + t0, c0 + len, h, i);
            let ks = row4(p.k, b, c0 + s0, c0 + len, h, i);
            for (var a = 0u; a < 4u; a = a + 1u) {
                kk[a] = kk[a] + kt[a] * ks;
                qk[a] = qk[a] + qt[a] * ks;
            }
        }
        for (var a = 0u; a < 4u; a = a + 1u) {
            let t = t0 + a;
            var log_decay = 0.0;  // a(t, s) = g[s + 1] + ... + g[t], s walking down from t
            for (var m = 0u; m <= t - s0 && t < len; m = m + 1u) {
                let s = t - m;
                if (m > 0u) {
                    log_decay = log_decay + gate(b, c0 + s + 1u, h);
                }
                if (s < s0 + 4u) {
                    let decay = exp(log_decay);
                    st_f32(base + C * C + t * C + s, decay * qk[a][s - s0]);
                    if (s < t) {
                        tri[t * C + s] = ld_f32(p.beta + step_index(b, c0 + t, h)) * decay * kk[a][s - s0];
                    }
                }
            }
        }
    }
    if (lane < len) {  // gamma[lane] and tail[lane]
        var upto = 0.0;
        var after = 0.0;
        for (var u = 0u; u < len; u = u + 1u) {
            let g = gate(b, c0 + u, h);
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
    let t = lane / 4u;  // T' row t, columns lane % 4, + 4, ...
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

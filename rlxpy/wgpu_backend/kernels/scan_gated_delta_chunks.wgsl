// Chunked gated delta rule, pass 2: chunks [first, first + count) of (batch b, head h) one after
// another, for the state columns j0 .. j0 + 15 (j0 = 16 x; the delta rule's columns evolve
// independently). Workgroup (column block x, b * heads + h y); lane = 4 t + quad handles step t of a
// chunk and columns j0 + 4 quad .. + 3. With S the state entering the chunk (rows i < N, in
// workgroup memory) and the pass-1 record (T', M, gamma, tail), per chunk of len steps:
//   X[t] = v_t - gamma[t] (k_t S);   D[t] = sum_{s <= t} T'[t, s] X[s];
//   o_t  = scale (gamma[t] (q_t S) + sum_{s <= t} M[t, s] D[s]);
//   S    = gamma[len - 1] S + sum_s tail[s] k_s D[s]^T.
// The state starts from state[b, h] (load = 1) or 0 and is stored back when store = 1.
// Bindings: 0 = arena window, 1 = ScanGatedDeltaChunkParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "scan_gated_delta_chunk.wgsl"

const MAX_N: u32 = {{MAX_N}}u;
var<workgroup> st: array<vec4<f32>, 4u * MAX_N>;  // S[i, j0 + 4 quad .. + 3] at 4 i + quad
var<workgroup> xd: array<vec4<f32>, 4u * C>;  // X, then D: step t, quad at 4 t + quad

// The 4 words at row + col .. + 3 (zero past column n).
fn ld4(row: u32, col: u32) -> vec4<f32> {
    var v = vec4<f32>();
    for (var e = 0u; e < 4u; e = e + 1u) {
        if (col + e < p.n) {
            v[e] = ld_f32(row + col + e);
        }
    }
    return v;
}

fn st4(row: u32, col: u32, v: vec4<f32>) {
    for (var e = 0u; e < 4u; e = e + 1u) {
        if (col + e < p.n) {
            st_f32(row + col + e, v[e]);
        }
    }
}

// sum over s <= t of w[s] xd[4 s + quad] (w = a row of T' or M in the record), 4 loads in flight.
fn lower_sum(w: u32, t: u32, quad: u32) -> vec4<f32> {
    var sum = vec4<f32>();
    var s = 0u;
    for (; s + 3u <= t; s = s + 4u) {
        let w4 = vec4<f32>(ld_f32(w + s), ld_f32(w + s + 1u), ld_f32(w + s + 2u), ld_f32(w + s + 3u));
        sum = sum + w4.x * xd[4u * s + quad] + w4.y * xd[4u * s + 4u + quad] + w4.z * xd[4u * s + 8u + quad]
            + w4.w * xd[4u * s + 12u + quad];
    }
    for (; s <= t; s = s + 1u) {
        sum = sum + ld_f32(w + s) * xd[4u * s + quad];
    }
    return sum;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let b = wid.y / p.heads;
    let h = wid.y % p.heads;
    let t = lane / 4u;
    let quad = lane % 4u;
    let col = 16u * wid.x + 4u * quad;
    let home = p.state + wid.y * p.n * p.n;
    for (var i = t; i < p.n; i = i + C) {
        var v = vec4<f32>();
        if (p.load == 1u) {
            v = ld4(home + i * p.n, col);
        }
        st[4u * i + quad] = v;
    }
    workgroupBarrier();
    for (var chunk = p.first; chunk < p.first + p.count; chunk = chunk + 1u) {
        let c0 = chunk * C;
        let len = min(C, p.steps - c0);
        let base = chunk_base(wid.y, chunk);
        let row = step_index(b, c0 + t, h) * p.n;
        var gamma = 0.0;
        var qs = vec4<f32>();
        if (t < len) {
            var ks = vec4<f32>();
            var i = 0u;
            for (; i + 4u <= p.n; i = i + 4u) {  // 8 loads in flight
                let k4 = vec4<f32>(ld_f32(p.k + row + i), ld_f32(p.k + row + i + 1u), ld_f32(p.k + row + i + 2u),
                                   ld_f32(p.k + row + i + 3u));
                let q4 = vec4<f32>(ld_f32(p.q + row + i), ld_f32(p.q + row + i + 1u), ld_f32(p.q + row + i + 2u),
                                   ld_f32(p.q + row + i + 3u));
                let s0 = st[4u * i + quad];
                let s1 = st[4u * i + 4u + quad];
                let s2 = st[4u * i + 8u + quad];
                let s3 = st[4u * i + 12u + quad];
                ks = ks + k4.x * s0 + k4.y * s1 + k4.z * s2 + k4.w * s3;
                qs = qs + q4.x * s0 + q4.y * s1 + q4.z * s2 + q4.w * s3;
            }
            for (; i < p.n; i = i + 1u) {
                let s = st[4u * i + quad];
                ks = ks + ld_f32(p.k + row + i) * s;
                qs = qs + ld_f32(p.q + row + i) * s;
            }
            gamma = ld_f32(base + 2u * C * C + t);
            xd[lane] = ld4(p.v + row, col) - gamma * ks;
        }
        workgroupBarrier();
        var d = vec4<f32>();
        if (t < len) {
            d = lower_sum(base + t * C, t, quad);
        }
        workgroupBarrier();
        if (t < len) {
            xd[lane] = d;
        }
        workgroupBarrier();
        if (t < len) {
            st4(p.o + row, col, (gamma * qs + lower_sum(base + C * C + t * C, t, quad)) * p.scale);
        }
        let decay = ld_f32(base + 2u * C * C + len - 1u);
        for (var i = t; i < p.n; i = i + C) {
            var s = decay * st[4u * i + quad];
            let tails = base + 2u * C * C + C;
            let stride = p.heads * p.n;  // from k_u[i] to k_{u+1}[i]
            let k0 = p.k + step_index(b, c0, h) * p.n + i;
            var u = 0u;
            for (; u + 4u <= len; u = u + 4u) {  // 8 loads in flight
                let k4 = vec4<f32>(ld_f32(k0 + u * stride), ld_f32(k0 + (u + 1u) * stride),
                                   ld_f32(k0 + (u + 2u) * stride), ld_f32(k0 + (u + 3u) * stride));
                let e4 = vec4<f32>(ld_f32(tails + u), ld_f32(tails + u + 1u), ld_f32(tails + u + 2u),
                                   ld_f32(tails + u + 3u));
                s = s + (e4.x * k4.x) * xd[4u * u + quad] + (e4.y * k4.y) * xd[4u * u + 4u + quad]
                    + (e4.z * k4.z) * xd[4u * u + 8u + quad] + (e4.w * k4.w) * xd[4u * u + 12u + quad];
            }
            for (; u < len; u = u + 1u) {
                s = s + (ld_f32(tails + u) * ld_f32(k0 + u * stride)) * xd[4u * u + quad];
            }
            st[4u * i + quad] = s;
        }
        workgroupBarrier();
    }
    if (p.store == 1u) {
        for (var i = t; i < p.n; i = i + C) {
            st4(home + i * p.n, col, st[4u * i + quad]);
        }
    }
}

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
            for (var i = 0u; i < p.n; i = i + 1u) {
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
            for (var s = 0u; s <= t; s = s + 1u) {
                d = d + ld_f32(base + t * C + s) * xd[4u * s + quad];
            }
        }
        workgroupBarrier();
        if (t < len) {
            xd[lane] = d;
        }
        workgroupBarrier();
        if (t < len) {
            var o = gamma * qs;
            for (var s = 0u; s <= t; s = s + 1u) {
                o = o + ld_f32(base + C * C + t * C + s) * xd[4u * s + quad];
            }
            st4(p.o + row, col, o * p.scale);
        }
        let decay = ld_f32(base + 2u * C * C + len - 1u);
        for (var i = t; i < p.n; i = i + C) {
            var s = decay * st[4u * i + quad];
            for (var u = 0u; u < len; u = u + 1u) {
                let ku = ld_f32(p.k + step_index(b, c0 + u, h) * p.n + i);
                s = s + (ld_f32(base + 2u * C * C + C + u) * ku) * xd[4u * u + quad];
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

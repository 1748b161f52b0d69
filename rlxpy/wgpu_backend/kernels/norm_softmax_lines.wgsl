// y[o, r, i] = exp(x[o, r, i] - m) / sum_j exp(x[o, j, i] - m), m = max_j x[o, j, i]; any axis. Bindings:
// 0 = arena window, 1 = NormSoftmaxLinesParams. One thread per line t = o * inner + i: online (max, sum) pass,
// then writes (phase 0); long lines go in r-chunks: phase 1 keeps (m, s) in y[o, 0..2, i], phase 2 writes.
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: NormSoftmaxLinesParams;

{{PRELUDE}}

// exp(a - m), with -inf inputs contributing exactly 0 (so a leading -inf does not turn the sum into NaN).
fn exp_shift(a: f32, m: f32) -> f32 {
    return select(exp(a - m), 0.0, a == -inf_f32());
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * {{WG}}u;
    if (t >= p.lines) {
        return;
    }
    let line = (t / p.inner) * p.axis_dim * p.inner + t % p.inner;
    let state_max = p.y + line;  // y[o, 0, i] and y[o, 1, i] hold (m, s) between chunked dispatches
    let state_sum = p.y + line + p.inner;
    var m: f32 = -inf_f32();
    var s: f32 = 0.0;
    if (p.phase == 2u || (p.phase == 1u && p.start > 0u)) {
        m = ld_f32(state_max);
        s = ld_f32(state_sum);
    }
    if (p.phase != 2u) {
        for (var r = p.start; r < p.start + p.count; r = r + 1u) {
            let v = ld_f32(p.x + line + r * p.inner);
            let m_new = maxp(m, v);
            s = s * exp_shift(m, m_new) + exp_shift(v, m_new);
            m = m_new;
        }
    }
    if (p.phase == 1u) {
        st_f32(state_max, m);
        st_f32(state_sum, s);
        return;
    }
    for (var r = p.start; r < p.start + p.count; r = r + 1u) {
        let at = line + r * p.inner;
        st_f32(p.y + at, exp_shift(ld_f32(p.x + at), m) / s);
    }
}

// y[o, r, i] = exp(x[o, r, i] - m) / sum_j exp(x[o, j, i] - m), m = max_j x[o, j, i]: softmax on any axis.
// One thread per line t = o * inner + i: an online (max, sum) pass over r, then a write pass.
// Bindings: 0 = arena window (u32 words), 1 = SoftmaxLinesParams (element offsets in the window).
struct SoftmaxLinesParams {
    lines: u32,
    axis_dim: u32,
    inner: u32,
    x: u32,
    y: u32,
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: SoftmaxLinesParams;

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
    let start = (t / p.inner) * p.axis_dim * p.inner + t % p.inner;
    var m: f32 = -inf_f32();
    var s: f32 = 0.0;
    for (var r = 0u; r < p.axis_dim; r = r + 1u) {
        let v = ld_f32(p.x + start + r * p.inner);
        let m_new = maxp(m, v);
        s = s * exp_shift(m, m_new) + exp_shift(v, m_new);
        m = m_new;
    }
    for (var r = 0u; r < p.axis_dim; r = r + 1u) {
        let at = start + r * p.inner;
        st_f32(p.y + at, exp_shift(ld_f32(p.x + at), m) / s);
    }
}

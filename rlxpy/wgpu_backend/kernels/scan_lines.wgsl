// y[o, r, i] = sum_{j <= r} x[o, j, i] (inclusive) or sum_{j < r} (exclusive, y[o, 0, i] = 0), any axis.
// One thread per line t = o * inner + i scanning r in order; neighbouring threads read neighbouring i.
// Bindings: 0 = arena window (u32 words), 1 = ScanLinesParams (element offsets; exclusive = 0/1).
struct ScanLinesParams {
    lines: u32,
    axis_dim: u32,
    inner: u32,
    x: u32,
    y: u32,
    exclusive: u32,
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ScanLinesParams;

{{PRELUDE}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * {{WG}}u;
    if (t >= p.lines) {
        return;
    }
    let o = t / p.inner;
    let start = o * p.axis_dim * p.inner + t % p.inner;
    var acc: f32 = 0.0;
    for (var r = 0u; r < p.axis_dim; r = r + 1u) {
        let at = start + r * p.inner;
        let v = ld_f32(p.x + at);
        if (p.exclusive == 1u) {
            st_f32(p.y + at, acc);
            acc = acc + v;
        } else {
            acc = acc + v;
            st_f32(p.y + at, acc);
        }
    }
}

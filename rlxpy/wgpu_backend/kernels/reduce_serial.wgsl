// y[o, i] = reduce_r x[o, r, i] (sum/mean/max/min/prod) for short reductions (reduce_dim <= 64).
// One thread per output t = o * inner + i folding r in order; neighbouring threads read neighbouring i.
// Bindings: 0 = arena window (u32 words), 1 = ReduceSerialParams (divisor = n for mean, else 1).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ReduceSerialParams;

{{PRELUDE}}

fn combine(a: f32, b: f32) -> f32 {
    return {{COMBINE}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * {{WG}}u;
    if (t >= p.outputs) {
        return;
    }
    let o = t / p.inner;
    let i = t % p.inner;
    let base = p.x + o * p.reduce_dim * p.inner + i;
    var acc: f32 = {{IDENTITY}};
    for (var r = 0u; r < p.reduce_dim; r = r + 1u) {
        acc = combine(acc, ld_f32(base + r * p.inner));
    }
    st_f32(p.y + t, acc / p.divisor);
}

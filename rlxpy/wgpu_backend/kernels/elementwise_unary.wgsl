// y[i] = act(x[i]) for one activation (the expression is filled in per use), f32 only.
// One thread per element; 1-D grid folded into y past 65535 workgroups.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseUnaryParams (element offsets in the window).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ElementwiseUnaryParams;

{{PRELUDE}}

fn act(v: f32) -> f32 {
    return {{EXPR}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if (i >= p.n) {
        return;
    }
    st_f32(p.y + i, act(ld_f32(p.x + i)));
}

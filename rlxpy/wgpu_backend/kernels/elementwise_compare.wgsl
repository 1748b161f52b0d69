// y[i] = (a[i] cmp b[i]) ? 1u : 0u, operands converted to the compute type {{T}}.
// One thread per element; NaN compares false except for !=, as IEEE and torch.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseCompareParams (element offsets in the window).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ElementwiseCompareParams;

{{PRELUDE}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if (i >= p.n) {
        return;
    }
    let a = {{T}}({{LOAD_A}}(p.a + i));
    let b = {{T}}({{LOAD_B}}(p.b + i));
    buf[p.y + i] = select(0u, 1u, {{EXPR}});
}

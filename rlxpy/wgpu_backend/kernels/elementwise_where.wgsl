// y[i] = c[i] != 0 ? a[i] : b[i] on equal-length operands (the condition of any word dtype; NaN is true).
// One thread per element.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseWhereParams (element offsets in the window).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ElementwiseWhereParams;

{{PRELUDE}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if (i >= p.n) {
        return;
    }
    let keep = (buf[p.c + i] & {{COND_MASK}}) != 0u;
    let a = {{T}}({{LOAD_A}}(p.a + i));
    let b = {{T}}({{LOAD_B}}(p.b + i));
    {{STORE}}(p.y + i, select(b, a, keep));
}

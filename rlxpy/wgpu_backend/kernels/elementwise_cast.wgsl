// y[i] = cast(x[i]) between word dtypes: float -> int truncates toward zero, saturates, NaN -> 0;
// anything -> bool is (x != 0). One thread per element.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseCastParams (element offsets in the window).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ElementwiseCastParams;

{{PRELUDE}}

fn convert(v: {{TX}}) -> {{TY}} {
    return {{EXPR}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if (i >= p.n) {
        return;
    }
    {{STORE}}(p.y + i, convert({{LOAD_X}}(p.x + i)));
}

// y[i] = a[i] op b[i] on equal-length operands (broadcasting was made explicit by unfuse).
// One thread per element; operands of any word dtype are converted to the compute type {{T}}.
// Bindings: 0 = arena window (u32 words), 1 = EwBinaryParams (element offsets in the window).
struct EwBinaryParams {
    n: u32,
    a: u32,
    b: u32,
    y: u32,
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: EwBinaryParams;

{{PRELUDE}}

// pow with numpy's answers where WGSL's pow is undefined (x <= 0, y == 0).
fn pow_f32(x: f32, y: f32) -> f32 {
    if (y == 0.0) {
        return 1.0;
    }
    if (is_nan(x) || is_nan(y)) {
        return nan_f32();
    }
    if (x == 0.0) {
        return select(0.0, inf_f32(), y < 0.0);
    }
    if (x < 0.0) {
        if (floor(y) != y) {
            return nan_f32();
        }
        let magnitude = pow(-x, y);
        let odd = abs(y) < 16777216.0 && (i32(abs(y)) & 1) == 1;
        return select(magnitude, -magnitude, odd);
    }
    return pow(x, y);
}

{{INT_FNS}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if (i >= p.n) {
        return;
    }
    let a = {{T}}({{LOAD_A}}(p.a + i));
    let b = {{T}}({{LOAD_B}}(p.b + i));
    {{STORE}}(p.y + i, {{EXPR}});
}

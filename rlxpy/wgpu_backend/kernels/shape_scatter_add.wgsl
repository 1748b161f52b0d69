// y = zeros([out_dim, width]); y[row(idx[u]), c] += updates[u, c] for u = 0..count-1 in order (numpy.add.at).
// One thread per column c: it owns y[:, c], zeroes it, then accumulates sequentially, so the result is deterministic.
// Bindings: 0 = arena window (u32 words), 1 = ShapeScatterAddParams (word offsets x, idx, y; rows outside skipped).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ShapeScatterAddParams;

const SKIP: u32 = 0xffffffffu;

// Output row of update u (fractions truncate), or SKIP when it falls outside [0, out_dim).
fn row_of(u: u32) -> u32 {
    {{ROW}}
}

// acc + v on the raw words of the element type.
fn accumulate(acc: u32, v: u32) -> u32 {
    return {{ADD}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let c = gid.x + gid.y * nwg.x * {{WG}}u;
    if (c >= p.width) {
        return;
    }
    for (var r = 0u; r < p.out_dim; r = r + 1u) {
        buf[p.y + r * p.width + c] = 0u;
    }
    for (var u = 0u; u < p.count; u = u + 1u) {
        let r = row_of(u);
        if (r != SKIP) {
            let at = p.y + r * p.width + c;
            buf[at] = accumulate(buf[at], buf[p.x + u * p.width + c]);
        }
    }
}

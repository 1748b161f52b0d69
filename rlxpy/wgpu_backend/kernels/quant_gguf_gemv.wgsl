// y[r, j] = sum_i x[r, i] * dequant(W)[j, i] for few x rows (decode GEMV); GGML blocks read in place.
// 256 threads = rows_per_wg teams x tpr lanes; a team owns RR weight rows (rows_per_wg apart), its lanes stride over their 32-element units; x sits in workgroup memory. Grouped (MoE) mode: grid y/z = x row, W slab = its expert.
// Bindings: 0 = arena window (u32 words; x, y, idx word offsets, w a BYTE offset), 1 = QuantGgufGemvParams.
struct QuantGgufGemvParams {
    m: u32,
    n: u32,
    k: u32,
    x: u32,
    w: u32,
    y: u32,
    row_bytes: u32,
    units: u32,
    tpr: u32,
    rows_per_wg: u32,
    w_stride: u32,
    idx: u32,
    experts: u32,
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: QuantGgufGemvParams;

{{DECODE}}

const MR: u32 = {{MR}}u;  // x rows per workgroup (1 in grouped mode)
const RR: u32 = {{RR}}u;  // weight rows per team
const KC: u32 = {{KC}}u;  // elements of each x row staged per chunk
const KC4: u32 = KC / 4u;
const UPC: u32 = KC / 32u;  // units per chunk (KC is a multiple of 32)
const GROUPED: bool = {{GROUPED}};

// x chunk as [MR][8 quads][UPC units]: the lanes of a team read adjacent vec4s (no bank conflicts);
// then [RR][MR][256] partial sums
var<workgroup> xs: array<vec4<f32>, {{XS}}>;
var<private> acc: array<array<f32, MR>, RR>;

// expert of x row i, or -1 when out of range (then the output row is zero)
fn expert_of(i: u32) -> i32 {
    {{EXPERT}}
}

// (value = scale * q [+ offset]) summed against x, from the dot of the raw quants and the sum of x
fn combine(sm: vec2<f32>, dq: f32, sx: f32) -> f32 {
    if (IS_FLOAT) {
        return dq;
    }
    if (HAS_MIN) {
        return sm.x * dq + sm.y * sx;
    }
    return sm.x * dq;
}

// acc[i][r] += dot(x[r, unit u], dequant(W row i of the team)[unit u]), generated fully unrolled
// (loops over private arrays would live in local memory); rows past n are computed and dropped
{{UNIT_DOT}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = lid.x;
    var x_rows = p.m;
    var x_base = p.x;
    var y_base = p.y;
    var w_base = p.w;
    var valid = true;
    if (GROUPED) {
        let batch = wid.y + wid.z * 65535u;
        if (batch >= p.m) {
            return;
        }
        let e = expert_of(batch);
        valid = e >= 0;
        x_rows = 1u;
        x_base = p.x + batch * p.k;
        y_base = p.y + batch * p.n;
        w_base = p.w + u32(max(e, 0)) * p.w_stride;
    }
    let team = t / p.tpr;  // once per thread, not in the loop
    let lane = t - team * p.tpr;
    let row0 = wid.x * p.rows_per_wg * RR + team;  // the team's rows: row0 + i * rows_per_wg
    var rows_live = 0u;
    if (team < p.rows_per_wg && row0 < p.n) {
        rows_live = min(RR, (p.n - row0 + p.rows_per_wg - 1u) / p.rows_per_wg);
    }
    let rb0 = w_base + row0 * p.row_bytes;
    for (var c0 = 0u; c0 < p.k; c0 = c0 + KC) {
        for (var j = t; j < MR * KC4; j = j + 256u) {
            let r = j / KC4;
            let quad = j - r * KC4;  // vec4 index along the chunk: unit quad >> 3, chunk quad & 7
            let e = c0 + quad * 4u;
            var v = vec4<f32>(0.0);
            if (r < x_rows) {
                let xb = x_base + r * p.k + e;
                for (var i = 0u; i < 4u; i = i + 1u) {
                    if (e + i < p.k) {
                        v[i] = bitcast<f32>(buf[xb + i]);
                    }
                }
            }
            xs[r * KC4 + (quad & 7u) * UPC + (quad >> 3u)] = v;
        }
        workgroupBarrier();
        if (rows_live > 0u) {
            let u0 = c0 >> 5u;
            let u1 = min(p.units, (c0 + KC) >> 5u);
            for (var u = u0 + lane; u < u1; u = u + p.tpr) {
                unit_dot(rb0, u, u - u0);
            }
        }
        workgroupBarrier();
    }
{{PARTIALS}}
    workgroupBarrier();
    // lanes of a team share out its (row, x row) sums
    for (var o = lane; o < rows_live * x_rows; o = o + p.tpr) {
        let i = o / x_rows;
        let r = o - i * x_rows;
        let base = ((i * MR + r) << 8u) + team * p.tpr;
        var s = 0.0;
        for (var j = 0u; j < p.tpr; j = j + 1u) {
            let q = base + j;
            s = s + xs[q >> 2u][q & 3u];
        }
        buf[y_base + r * p.n + row0 + i * p.rows_per_wg] = bitcast<u32>(select(0.0, s, valid));
    }
}

// y[r, j] = sum_i x[r, i] * dequant(W)[j, i] for few x rows (decode GEMV); GGML blocks read in place.
// 256 threads = rows_per_wg weight rows x tpr lanes; lanes stride over the 32-element units of their row, x sits in workgroup memory; grouped (MoE) mode: grid y/z = x row, W slab = expert.
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
const KC: u32 = {{KC}}u;  // elements of each x row staged per chunk (a multiple of 256)
const KC4: u32 = KC / 4u;
const GROUPED: bool = {{GROUPED}};

var<workgroup> xs: array<vec4<f32>, {{XS}}>;  // [MR][KC4] x chunk, then [MR][256] partial sums
var<private> acc: array<f32, MR>;

// expert of x row i, or -1 when out of range (then the output row is zero)
fn expert_of(i: u32) -> i32 {
    {{EXPERT}}
}

// acc[r] += dot(x[r, unit u], dequant(W row at rb)[unit u]); xv = vec4 index of the unit in xs
fn unit_dot(rb: u32, u: u32, xv: u32) {
    for (var hf = 0u; hf < 2u; hf = hf + 1u) {
        let sm = q_scale(rb, u, hf);
        // explicit initialisers: naga hoists loop-local vars and would not re-zero them
        var dq = array<f32, MR>();
        var sx = array<f32, MR>();
        for (var cc = 0u; cc < 4u; cc = cc + 1u) {
            let c = hf * 4u + cc;
            let q = q_chunk(rb, u, c);
            for (var r = 0u; r < MR; r = r + 1u) {
                let xq = xs[r * KC4 + xv + c];
                dq[r] = dq[r] + dot(q, xq);
                if (HAS_MIN) {
                    sx[r] = sx[r] + (xq.x + xq.y) + (xq.z + xq.w);
                }
            }
        }
        for (var r = 0u; r < MR; r = r + 1u) {
            if (IS_FLOAT) {
                acc[r] = acc[r] + dq[r];
            } else if (HAS_MIN) {
                acc[r] = acc[r] + (sm.x * dq[r] + sm.y * sx[r]);
            } else {
                acc[r] = acc[r] + sm.x * dq[r];
            }
        }
    }
}

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
    let row_local = t / p.tpr;  // once per thread, not in the loop
    let lane = t - row_local * p.tpr;
    let row = wid.x * p.rows_per_wg + row_local;
    let live = row_local < p.rows_per_wg && row < p.n;
    let rb = w_base + row * p.row_bytes;
    for (var c0 = 0u; c0 < p.k; c0 = c0 + KC) {
        for (var j = t; j < MR * KC4; j = j + 256u) {
            let r = j / KC4;
            let e = c0 + (j - r * KC4) * 4u;
            var v = vec4<f32>(0.0);
            if (r < x_rows) {
                let xb = x_base + r * p.k + e;
                for (var i = 0u; i < 4u; i = i + 1u) {
                    if (e + i < p.k) {
                        v[i] = bitcast<f32>(buf[xb + i]);
                    }
                }
            }
            xs[j] = v;
        }
        workgroupBarrier();
        if (live) {
            let u0 = c0 >> 5u;
            let u1 = min(p.units, (c0 + KC) >> 5u);
            for (var u = u0 + lane; u < u1; u = u + p.tpr) {
                unit_dot(rb, u, (u - u0) << 3u);
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < MR; r = r + 1u) {
        let i = r * 256u + t;
        xs[i >> 2u][i & 3u] = acc[r];
    }
    workgroupBarrier();
    if (live) {
        for (var r = lane; r < x_rows; r = r + p.tpr) {
            let base = r * 256u + row_local * p.tpr;
            var s = 0.0;
            for (var j = 0u; j < p.tpr; j = j + 1u) {
                let i = base + j;
                s = s + xs[i >> 2u][i & 3u];
            }
            buf[y_base + r * p.n + row] = bitcast<u32>(select(0.0, s, valid));
        }
    }
}

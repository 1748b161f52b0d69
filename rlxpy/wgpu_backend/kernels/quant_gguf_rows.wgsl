// y[r, j] = sum_i h[r, i] * dequant(W)[j, i]: the GEMV of quant_gguf_gemv.wgsl (same params, same
// fused epilogues) shaped for CPU adapters. One invocation owns RR output rows and walks all of k
// alone: no workgroup memory, no barriers. lavapipe/llvmpipe run a workgroup as SIMD batches of
// invocations, where a barrier suspends every batch and workgroup memory is plain memory; x and
// gamma are read at indices every invocation shares, which the CPU compiler loads once per batch.
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
    w_up: u32,
    gamma: u32,
    residual: u32,
    eps: f32,
    q_width: u32,
    kv_width: u32,
    capacity: u32,
    max_pos: u32,
    k_cache: u32,
    v_cache: u32,
    cos: u32,
    sin: u32,
    pos: u32,
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: QuantGgufGemvParams;

{{DECODE}}

const MR: u32 = {{MR}}u;  // x rows per invocation (grid y walks blocks of MR rows)
const RR: u32 = {{RR}}u;  // output rows per invocation: 2 with RoPE (a rotation pair), else 1
const GROUPED: bool = {{GROUPED}};
const NORM: bool = {{NORM}};
const SWIGLU: bool = {{SWIGLU}};
const RESIDUAL: bool = {{RESIDUAL}};
const ROPE: bool = {{ROPE}};
const RD: u32 = {{RD}}u;
const ROT: u32 = {{ROT}}u;
const INTERLEAVED: bool = {{INTERLEAVED}};

var<private> acc: array<array<f32, MR>, RR>;
var<private> acc_up: array<array<f32, MR>, RR>;
var<private> inv_rms: array<f32, MR>;

fn expert_of(i: u32) -> i32 {
    {{EXPERT}}
}

// Output row i of invocation g. With RoPE the two rows are a rotation pair of one head:
// (2d, 2d + 1) interleaved, else (d, d + ROT/2) for rotated dims and consecutive unrotated ones.
fn out_row(g: u32, i: u32) -> u32 {
    if (!ROPE) {
        return g * RR + i;
    }
    let h = g / (RD / 2u);
    let d = g - h * (RD / 2u);
    if (INTERLEAVED) {
        return h * RD + 2u * d + i;
    }
    if (d < ROT / 2u) {
        return h * RD + d + i * (ROT / 2u);
    }
    return h * RD + ROT + 2u * (d - ROT / 2u) + i;
}

// x row r, elements e .. e + 3 (zero past k), normalised when NORM
fn ld_x(base: u32, r: u32, e: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (e + i < p.k) {
            v[i] = bitcast<f32>(buf[base + r * p.k + e + i]);
            if (NORM) {
                v[i] = v[i] * inv_rms[r] * bitcast<f32>(buf[p.gamma + e + i]);
            }
        }
    }
    return v;
}

// (scale * q [+ offset]) . x of one half unit, from the raw-quant dot and the sum of x
fn combine(sm: vec2<f32>, dq: f32, sx: f32) -> f32 {
    if (IS_FLOAT) {
        return dq;
    }
    if (HAS_MIN) {
        return sm.x * dq + sm.y * sx;
    }
    return sm.x * dq;
}

fn half_dot(q: array<vec4<f32>, 8>, xq: array<vec4<f32>, 8>, hf: u32) -> f32 {
    let c = 4u * hf;
    return (dot(q[c], xq[c]) + dot(q[c + 1u], xq[c + 1u])) + (dot(q[c + 2u], xq[c + 2u]) + dot(q[c + 3u], xq[c + 3u]));
}

fn accumulate(rb: u32, u: u32, i: u32, xq: array<vec4<f32>, 8>, sx: vec2<f32>, r: u32, up: bool) {
    let q = q_unit(rb, u);
    let s0 = q_scale(rb, u, 0u);
    let s1 = q_scale(rb, u, 1u);
    let v = combine(s0, half_dot(q, xq, 0u), sx.x) + combine(s1, half_dot(q, xq, 1u), sx.y);
    if (up) {
        acc_up[i][r] = acc_up[i][r] + v;
    } else {
        acc[i][r] = acc[i][r] + v;
    }
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
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
    } else if (wid.y > 0u || p.m > MR) {
        let first = wid.y * MR;
        if (first >= p.m) {
            return;
        }
        x_rows = min(MR, p.m - first);
        x_base = p.x + first * p.k;
        y_base = p.y + first * p.n;
    }
    // Invocations past the last row recompute it and store nothing: the batch stays converged,
    // so the shared x loads stay single loads.
    let g_count = (p.n + RR - 1u) / RR;
    let live = gid.x < g_count;
    let g = min(gid.x, g_count - 1u);
    var rows: array<u32, RR>;
    for (var i = 0u; i < RR; i = i + 1u) {
        rows[i] = min(out_row(g, i), p.n - 1u);
        for (var r = 0u; r < MR; r = r + 1u) {
            acc[i][r] = 0.0;
            acc_up[i][r] = 0.0;
        }
    }
    if (NORM) {
        for (var r = 0u; r < MR; r = r + 1u) {
            var ss = 0.0;
            if (r < x_rows) {
                for (var e = 0u; e < p.k; e = e + 1u) {
                    let v = bitcast<f32>(buf[x_base + r * p.k + e]);
                    ss = ss + v * v;
                }
            }
            inv_rms[r] = 1.0 / sqrt(ss / f32(p.k) + p.eps);
        }
    }
    for (var u = 0u; u < p.units; u = u + 1u) {
        for (var r = 0u; r < MR; r = r + 1u) {
            if (r >= x_rows) {
                break;
            }
            var xq: array<vec4<f32>, 8>;
            for (var c = 0u; c < 8u; c = c + 1u) {
                xq[c] = ld_x(x_base, r, u * 32u + 4u * c);
            }
            let one = vec4<f32>(1.0);
            let sx = vec2<f32>(dot((xq[0] + xq[1]) + (xq[2] + xq[3]), one),
                               dot((xq[4] + xq[5]) + (xq[6] + xq[7]), one));
            for (var i = 0u; i < RR; i = i + 1u) {
                accumulate(w_base + rows[i] * p.row_bytes, u, i, xq, sx, r, false);
                if (SWIGLU) {
                    accumulate(p.w_up + rows[i] * p.row_bytes, u, i, xq, sx, r, true);
                }
            }
        }
    }
    for (var r = 0u; r < MR; r = r + 1u) {
        if (r >= x_rows) {
            break;
        }
        var s: array<f32, RR>;
        for (var i = 0u; i < RR; i = i + 1u) {
            var v = acc[i][r];
            if (SWIGLU) {
                v = v / (1.0 + exp(-v)) * acc_up[i][r];
            }
            if (RESIDUAL) {
                v = v + bitcast<f32>(buf[p.residual + r * p.n + rows[i]]);
            }
            s[i] = v;
        }
        if (!live) {
            continue;
        }
        if (!ROPE) {
            for (var i = 0u; i < RR; i = i + 1u) {
                buf[y_base + r * p.n + rows[i]] = bitcast<u32>(select(0.0, s[i], valid));
            }
            continue;
        }
        // RoPE + KV append of the pair (rows[0] leads, rows[1] is its mate), as rope_kv_append.wgsl
        let pos = buf[p.pos] + r;
        let d = rows[0] % RD;
        if (rows[0] < p.q_width + p.kv_width && d < ROT) {
            let half = ROT / 2u;
            let idx = select(d, d / 2u, INTERLEAVED);
            let tr = min(pos, p.max_pos - 1u);
            let cs = bitcast<f32>(buf[p.cos + tr * half + idx]);
            let sn = bitcast<f32>(buf[p.sin + tr * half + idx]);
            let a = s[0];
            let b = s[RR - 1u];  // the mate (RR is 2 whenever ROPE holds; RR - 1 keeps naga's bounds check quiet)
            s[0] = a * cs - b * sn;
            s[RR - 1u] = b * cs + a * sn;
        }
        for (var i = 0u; i < RR; i = i + 1u) {
            let row = rows[i];
            if (row < p.q_width) {
                buf[p.y + r * p.q_width + row] = bitcast<u32>(s[i]);
            } else if (pos < p.capacity) {  // rows past the cache capacity are dropped, as CacheWrite does
                let c = row - p.q_width;
                if (c < p.kv_width) {
                    buf[p.k_cache + pos * p.kv_width + c] = bitcast<u32>(s[i]);
                } else {
                    buf[p.v_cache + pos * p.kv_width + c - p.kv_width] = bitcast<u32>(s[i]);
                }
            }
        }
    }
}

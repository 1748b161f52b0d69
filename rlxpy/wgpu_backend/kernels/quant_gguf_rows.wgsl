// y[r, j] = sum_i h[r, i] * dequant(W)[j, i]: the GEMV of quant_gguf_gemv.wgsl (same params, same
// fused epilogues) shaped for CPU adapters. One invocation owns RR output rows and walks all of k
// alone: no workgroup memory, no barriers. lavapipe/llvmpipe run a workgroup as SIMD batches of
// invocations, where a barrier suspends every batch and workgroup memory is plain memory; x and
// gamma are read at indices every invocation shares, which the CPU compiler loads once per batch.
// RMSNorm: dot(W, x * gamma) and sum(x^2) accumulate in the same walk; 1/rms scales the dot at the end.
// Bindings: 0 = arena window (u32 words; x, y, idx word offsets, w a BYTE offset), 1 = QuantGgufGemvParams.
#include "quant_gguf_gemv_common.wgsl"

const K_TAIL: bool = {{K_TAIL}};  // k is not a whole number of 32-element units (float types)

var<private> sum_sq: array<f32, MR>;  // sum(x^2) of each x row (NORM)
var<private> res: array<array<f32, MR>, RR>;  // the dot products, copied out of the generated accumulators
var<private> res_up: array<array<f32, MR>, RR>;

// Output row i of invocation g. With RoPE, rows (2j, 2j + 1) of the invocation are rotation pair
// g * RR / 2 + j of the q|k|v block: per head (2d, 2d + 1) interleaved, else (d, d + ROT/2) for
// rotated dims and consecutive pairs of the unrotated ones.
fn out_row(g: u32, i: u32) -> u32 {
    if (!ROPE) {
        return g * RR + i;
    }
    let pair = g * (RR / 2u) + i / 2u;
    let second = i % 2u;
    let h = pair / (RD / 2u);
    let d = pair - h * (RD / 2u);
    if (INTERLEAVED) {
        return h * RD + 2u * d + second;
    }
    if (d < ROT / 2u) {
        return h * RD + d + second * (ROT / 2u);
    }
    return h * RD + ROT + 2u * (d - ROT / 2u) + second;
}

// x row r, elements e .. e + 3 (zero past k); with NORM times gamma, its squares summed into sum_sq
fn ld_x(base: u32, r: u32, e: u32) -> vec4<f32> {
    let i = base + r * p.k + e;
    var v = vec4<f32>(bitcast<f32>(buf[i]), bitcast<f32>(buf[i + 1u]), bitcast<f32>(buf[i + 2u]),
                      bitcast<f32>(buf[i + 3u]));
    if (K_TAIL) {
        v = select(vec4<f32>(0.0), v, vec4<u32>(e) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(p.k));
    }
    if (NORM) {
        sum_sq[r] = sum_sq[r] + dot(v, v);
        let g = vec4<f32>(bitcast<f32>(buf[p.gamma + e]), bitcast<f32>(buf[p.gamma + e + 1u]),
                          bitcast<f32>(buf[p.gamma + e + 2u]), bitcast<f32>(buf[p.gamma + e + 3u]));
        v = v * g;
    }
    return v;
}

// one decoded weight unit (raw quants q, half scales sa / sb) against one unit of an x row (xq, half sums sx)
fn unit_dot(q: array<vec4<f32>, 8>, sa: vec2<f32>, sb: vec2<f32>, xq: array<vec4<f32>, 8>, sx: vec2<f32>) -> f32 {
    let d0 = (dot(q[0], xq[0]) + dot(q[1], xq[1])) + (dot(q[2], xq[2]) + dot(q[3], xq[3]));
    let d1 = (dot(q[4], xq[4]) + dot(q[5], xq[5])) + (dot(q[6], xq[6]) + dot(q[7], xq[7]));
    return combine(sa, d0, sx.x) + combine(sb, d1, sx.y);
}

// x row r's unit u: its eight quads
fn x_unit(base: u32, r: u32, u: u32) -> array<vec4<f32>, 8> {
    let e = u * 32u;
    return array<vec4<f32>, 8>(ld_x(base, r, e), ld_x(base, r, e + 4u), ld_x(base, r, e + 8u),
                               ld_x(base, r, e + 12u), ld_x(base, r, e + 16u), ld_x(base, r, e + 20u),
                               ld_x(base, r, e + 24u), ld_x(base, r, e + 28u));
}

fn half_sums(xq: array<vec4<f32>, 8>) -> vec2<f32> {
    let one = vec4<f32>(1.0);
    return vec2<f32>(dot((xq[0] + xq[1]) + (xq[2] + xq[3]), one), dot((xq[4] + xq[5]) + (xq[6] + xq[7]), one));
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let blk = x_block(wid);
    if (blk.skip) {
        return;
    }
    // Invocations past the last rows recompute them and store nothing: the batch stays converged.
    let g_count = (p.n + RR - 1u) / RR;
    let live = gid.x < g_count;
    let g = min(gid.x, g_count - 1u);
    var rows: array<u32, RR>;
    for (var i = 0u; i < RR; i = i + 1u) {
        rows[i] = min(out_row(g, i), p.n - 1u);
    }
    for (var r = 0u; r < MR; r = r + 1u) {
        sum_sq[r] = 0.0;
    }
    // Generated, unrolled over the RR weight rows and MR x rows: the accumulators stay registers
    // and each x unit is loaded once for all RR rows (rows past blk.rows compute and are dropped).
{{ACCUMULATE}}
    for (var r = 0u; r < MR; r = r + 1u) {
        if (r >= blk.rows) {
            break;
        }
        let inv_rms = select(1.0, 1.0 / sqrt(sum_sq[r] / f32(p.k) + p.eps), NORM);
        var s: array<f32, RR>;
        for (var i = 0u; i < RR; i = i + 1u) {
            var v = res[i][r] * inv_rms;
            if (SWIGLU) {
                v = v / (1.0 + exp(-v)) * (res_up[i][r] * inv_rms);
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
                if (out_row(g, i) < p.n) {
                    buf[blk.y + r * p.n + rows[i]] = bitcast<u32>(select(0.0, s[i], blk.valid));
                }
            }
            continue;
        }
        // RoPE + KV append of each pair (rows[2j] leads, rows[2j + 1] is its mate), as rope_kv_append.wgsl
        let pos = buf[p.pos] + r;
        for (var j = 0u; j < RR; j = j + 2u) {
            let d = rows[j] % RD;
            if (rows[j] < p.q_width + p.kv_width && d < ROT) {
                let idx = select(d, d / 2u, INTERLEAVED);
                let tr = min(pos, p.max_pos - 1u);
                let cs = bitcast<f32>(buf[p.cos + tr * (ROT / 2u) + idx]);
                let sn = bitcast<f32>(buf[p.sin + tr * (ROT / 2u) + idx]);
                let a = s[j];
                let b = s[j + 1u];
                s[j] = a * cs - b * sn;
                s[j + 1u] = b * cs + a * sn;
            }
        }
        for (var i = 0u; i < RR; i = i + 1u) {
            let row = rows[i];
            if (out_row(g, i) >= p.n) {
                continue;  // a pair past the last head (clamped above)
            }
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

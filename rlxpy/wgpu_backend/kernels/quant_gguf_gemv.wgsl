// y[r, j] = sum_i h[r, i] * dequant(W)[j, i] for few x rows (decode GEMV), GGML blocks read in place; h = x or rms_norm(x)*gamma, optional SwiGLU with W_up and residual add, or RoPE + KV-cache append of a QKV block (FusedGgufMatMul).
// 256 threads = rows_per_wg teams x tpr lanes; a team owns RR weight rows (rows_per_wg apart), its lanes stride over their 32-element units; x sits in workgroup memory. Grouped (MoE) mode: grid y/z = x row, W slab = its expert.
// Cross-lane sums: through workgroup memory, or where the device has subgroups a shuffle-xor butterfly
// inside each aligned power-of-two group of lanes first (the lowerer's choice: SG_ARGS, SPAN, LANE_SUM).
// FAST_STAGE (one x row in one chunk, subgroups): x loaded once, the RMSNorm's sum by subgroupAdd (STAGE).
// Bindings: 0 = arena window (u32 words; x, y, idx word offsets, w a BYTE offset), 1 = QuantGgufGemvParams.
#include "quant_gguf_gemv_common.wgsl"

const KC: u32 = {{KC}}u;  // elements of each x row staged per chunk
const KC4: u32 = KC / 4u;
const UPC: u32 = KC / 32u;  // units per chunk (KC is a multiple of 32)
const FAST_STAGE: bool = {{FAST_STAGE}};  // MR = 1, k <= KC, subgroups: STAGE

// x chunk as [MR][8 quads][UPC units]: the lanes of a team read adjacent vec4s (no bank conflicts);
// then [RR][MR][256] partial sums
var<workgroup> xs: array<vec4<f32>, {{XS}}>;
var<private> acc: array<array<f32, MR>, RR>;
var<private> acc_up: array<array<f32, MR>, RR>;  // SwiGLU's second weight
var<workgroup> norm_parts: array<f32, 256>;  // [MR][16] partial sums of squares (STAGE: one a subgroup)
var<workgroup> inv_rms: array<f32, 8>;
// RoPE: every workgroup's block of output rows holds both rows of each rotation pair (the lowerer
// picks the row split); they are staged here: [MR][block rows] outputs before RoPE
var<workgroup> ys: array<f32, {{YS}}>;

// RoPE of the staged block (rows first .. first + block - 1 of y; x rows at positions pos + r), then
// q to y [MR, q_width], k and v to the caches at row pos + r, as rope_kv_append.wgsl does
fn rope_append(t: u32, first: u32, x_rows: u32) {
    let block = p.rows_per_wg * RR;
    let half = ROT / 2u;
    for (var j = t; j < x_rows * block; j = j + 256u) {
        let r = j / block;
        let g = first + j - r * block;
        if (g >= p.n) {
            continue;
        }
        let row = buf[p.pos] + r;
        var c = g;  // column inside q, k or v
        var dst = p.y + r * p.q_width + g;
        if (g >= p.q_width) {
            if (row >= p.capacity) {
                continue;  // rows past the cache capacity are dropped, as CacheWrite does
            }
            c = g - p.q_width;
            if (c >= p.kv_width) {
                buf[p.v_cache + row * p.kv_width + c - p.kv_width] = bitcast<u32>(ys[j]);
                continue;
            }
            dst = p.k_cache + row * p.kv_width + c;
        }
        let d = c % RD;
        var v = ys[j];
        if (d < ROT) {
            let tr = min(row, p.max_pos - 1u);  // positions past the tables clamp
            var i = d % half;
            var leading = d < half;
            var mate = j + half;
            if (INTERLEAVED) {
                i = d / 2u;
                leading = (d & 1u) == 0u;
                mate = j + 1u;
            }
            if (!leading) {
                mate = select(j - half, j - 1u, INTERLEAVED);
            }
            let cs = bitcast<f32>(buf[p.cos + tr * half + i]);
            let sn = bitcast<f32>(buf[p.sin + tr * half + i]);
            v = select(v * cs + ys[mate] * sn, v * cs - ys[mate] * sn, leading);
        }
        buf[dst] = bitcast<u32>(v);
    }
}

// elements e .. e + 3 of the k at base (0 past k), four loads issued together
fn quad_at(base: u32, e: u32) -> vec4<f32> {
    let last = p.k - 1u;
    let v = vec4<f32>(bitcast<f32>(buf[base + min(e, last)]), bitcast<f32>(buf[base + min(e + 1u, last)]),
                      bitcast<f32>(buf[base + min(e + 2u, last)]), bitcast<f32>(buf[base + min(e + 3u, last)]));
    return select(vec4<f32>(0.0), v, vec4<u32>(e, e + 1u, e + 2u, e + 3u) < vec4<u32>(p.k));
}

// acc[i][r] += dot(x[r, unit u], dequant(W row i of the team)[unit u]) for the team's weight rows at
// rb + i * stride (and W_up's at rbu), the body generated fully unrolled (loops over private arrays
// would live in local memory); rows past n are computed and dropped
fn unit_dot(rb: u32, rbu: u32, u: u32, uc: u32) {
    let stride = p.rows_per_wg * p.row_bytes;
{{UNIT_DOT}}
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>{{SG_ARGS}}) {
    let t = lid.x;
    let blk = x_block(wid);
    if (blk.skip) {
        return;
    }
    let team = t / p.tpr;  // once per thread, not in the loop
    let lane = t - team * p.tpr;
    let row0 = wid.x * p.rows_per_wg * RR + team;  // the team's rows: row0 + i * rows_per_wg
    var rows_live = 0u;
    if (team < p.rows_per_wg && row0 < p.n) {
        rows_live = min(RR, (p.n - row0 + p.rows_per_wg - 1u) / p.rows_per_wg);
    }
    let rb0 = blk.w + row0 * p.row_bytes;
    let rbu0 = p.w_up + row0 * p.row_bytes;
    if (FAST_STAGE) {
        // one x row in one chunk (decode): each thread loads its quads of x (and gamma) once, the RMSNorm's
        // sum of squares goes through subgroupAdd and one barrier (STAGE, generated), then the units
{{STAGE}}
        workgroupBarrier();
        if (rows_live > 0u) {
            for (var u = lane; u < p.units; u = u + p.tpr) {
                unit_dot(rb0, rbu0, u, u);
            }
        }
        workgroupBarrier();
    } else {
        if (NORM) {
            // mean of squares of each x row: 256 strided partials -> 16 per row -> 1 per row
            for (var r = 0u; r < MR; r = r + 1u) {
                var ss = 0.0;
                if (r < blk.rows) {
                    for (var e = t; e < p.k; e = e + 256u) {
                        let v = bitcast<f32>(buf[blk.x + r * p.k + e]);
                        ss = ss + v * v;
                    }
                }
                let slot = (r << 8u) + t;
                xs[slot >> 2u][slot & 3u] = ss;
            }
            workgroupBarrier();
            if (t < MR * 16u) {
                var s = 0.0;
                for (var j = 0u; j < 16u; j = j + 1u) {
                    let slot = ((t >> 4u) << 8u) + ((t & 15u) << 4u) + j;
                    s = s + xs[slot >> 2u][slot & 3u];
                }
                norm_parts[t] = s;
            }
            workgroupBarrier();
            if (t < MR) {
                var s = 0.0;
                for (var j = 0u; j < 16u; j = j + 1u) {
                    s = s + norm_parts[t * 16u + j];
                }
                inv_rms[t] = 1.0 / sqrt(s / f32(p.k) + p.eps);
            }
            workgroupBarrier();
        }
        for (var c0 = 0u; c0 < p.k; c0 = c0 + KC) {
            for (var j = t; j < MR * KC4; j = j + 256u) {
                let r = j / KC4;
                let quad = j - r * KC4;  // vec4 index along the chunk: unit quad >> 3, chunk quad & 7
                let e = c0 + quad * 4u;
                var v = vec4<f32>(0.0);
                if (r < blk.rows) {
                    let xb = blk.x + r * p.k + e;
                    for (var i = 0u; i < 4u; i = i + 1u) {
                        if (e + i < p.k) {
                            v[i] = bitcast<f32>(buf[xb + i]);
                            if (NORM) {
                                v[i] = v[i] * inv_rms[r] * bitcast<f32>(buf[p.gamma + e + i]);
                            }
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
                    unit_dot(rb0, rbu0, u, u - u0);
                }
            }
            workgroupBarrier();
        }
    }
    // with subgroups each aligned group of `span` lanes sums its partials first (LANE_SUM) and only
    // its first lane stores them; the epilogue then adds tpr / span values instead of tpr
    let span = {{SPAN}};
{{LANE_SUM}}
    if ((lane & (span - 1u)) == 0u) {
{{PARTIALS}}
    }
    workgroupBarrier();
    // lanes of a team share out its (row, x row) sums
    for (var o = lane; o < rows_live * blk.rows; o = o + p.tpr) {
        let i = o / blk.rows;
        let r = o - i * blk.rows;
        let base = ((i * MR + r) << 8u) + team * p.tpr;
        var s = 0.0;
        for (var j = 0u; j < p.tpr; j = j + span) {
            let q = base + j;
            s = s + xs[q >> 2u][q & 3u];
        }
        let out = r * p.n + row0 + i * p.rows_per_wg;
        if (SWIGLU) {
            var up = 0.0;
            for (var j = 0u; j < p.tpr; j = j + span) {
                let q = base + ((RR * MR) << 8u) + j;
                up = up + xs[q >> 2u][q & 3u];
            }
            s = s / (1.0 + exp(-s)) * up;
        }
        if (RESIDUAL) {
            s = s + bitcast<f32>(buf[p.residual + out]);
        }
        if (ROPE) {
            ys[r * p.rows_per_wg * RR + team + i * p.rows_per_wg] = s;
        } else {
            buf[blk.y + out] = bitcast<u32>(select(0.0, s, blk.valid));
        }
    }
    if (ROPE) {
        workgroupBarrier();
        rope_append(t, wid.x * p.rows_per_wg * RR, blk.rows);
    }
}

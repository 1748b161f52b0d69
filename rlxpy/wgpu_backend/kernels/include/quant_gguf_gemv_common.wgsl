// What the two GGUF GEMV variants share (quant_gguf_gemv for GPUs, quant_gguf_rows for CPU adapters):
// the decoder of the weight type, the fused epilogues' switches, the expert of an x row (grouped mode),
// which x rows a workgroup takes, and how the raw-quant dots combine with the scales. Needs the params
// m, n, k, x, y, w, w_stride, idx, experts.
#include "common_arena.wgsl"
#include "quant_gguf_decode_{{DECODER}}.wgsl"

const MR: u32 = {{MR}}u;  // x rows per workgroup or invocation (1 in grouped mode)
const RR: u32 = {{RR}}u;  // weight rows per team or invocation
const GROUPED: bool = {{GROUPED}};  // MoE: one x row per grid row, weights of its expert
const NORM: bool = {{NORM}};  // h = x * rsqrt(mean(x^2) + eps) * gamma (x row by x row)
const SWIGLU: bool = {{SWIGLU}};  // y = silu(h . W) * (h . W_up)
const RESIDUAL: bool = {{RESIDUAL}};  // y += residual
// RoPE + KV append (ops.RopeKvAppend on y = the q|k|v block), rows paired by the lowerer
const ROPE: bool = {{ROPE}};
const RD: u32 = {{RD}}u;  // head_dim
const ROT: u32 = {{ROT}}u;  // rotated dims of a head (even)
const INTERLEAVED: bool = {{INTERLEAVED}};  // pairs (2i, 2i+1), else (i, i + ROT/2)

// Expert of x row i, or -1 when out of range (then the output row is zero): the index truncated
// toward zero, read as the index dtype {{EXPERT}} ("none" outside grouped mode).
fn expert_f32(i: u32) -> i32 {
    let v = trunc(bitcast<f32>(buf[p.idx + i]));
    if (v >= 0.0 && v < f32(p.experts)) { return i32(v); }
    return -1;
}
fn expert_i32(i: u32) -> i32 {
    let v = bitcast<i32>(buf[p.idx + i]);
    if (v >= 0 && u32(v) < p.experts) { return v; }
    return -1;
}
fn expert_u32(i: u32) -> i32 {
    let v = buf[p.idx + i];
    if (v < p.experts) { return i32(v); }
    return -1;
}
fn expert_none(i: u32) -> i32 {
    return 0;
}
fn expert_of(i: u32) -> i32 {
    return expert_{{EXPERT}}(i);
}

// Which x rows a workgroup takes: in grouped (MoE) mode grid y/z is one x row, whose weights are its
// expert's slab (an expert out of range gives a zero row: valid = false); otherwise grid y walks
// blocks of MR x rows, each block reading W once.
struct XBlock {
    rows: u32,
    x: u32,
    y: u32,
    w: u32,
    valid: bool,
    skip: bool,  // past the last row: the workgroup has nothing to do
}

fn x_block(wid: vec3<u32>) -> XBlock {
    var b = XBlock(p.m, p.x, p.y, p.w, true, false);
    if (GROUPED) {
        let batch = wid.y + wid.z * 65535u;
        if (batch >= p.m) {
            b.skip = true;
            return b;
        }
        let e = expert_of(batch);
        b.valid = e >= 0;
        b.rows = 1u;
        b.x = p.x + batch * p.k;
        b.y = p.y + batch * p.n;
        b.w = p.w + u32(max(e, 0)) * p.w_stride;
    } else if (wid.y > 0u || p.m > MR) {
        let first = wid.y * MR;
        if (first >= p.m) {
            b.skip = true;
            return b;
        }
        b.rows = min(MR, p.m - first);
        b.x = p.x + first * p.k;
        b.y = p.y + first * p.n;
    }
    return b;
}

// (value = scale * q [+ offset]) summed against x, from the dot of the raw quants dq and the sum of x sx
fn combine(sm: vec2<f32>, dq: f32, sx: f32) -> f32 {
    if (IS_FLOAT) {
        return dq;
    }
    if (HAS_MIN) {
        return sm.x * dq + sm.y * sx;
    }
    return sm.x * dq;
}

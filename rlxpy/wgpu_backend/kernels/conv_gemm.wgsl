// y = act(conv(x, w) + bias) as an implicit GEMM per group (grid z): rows m = (n, output position),
// columns o = the group's output channels, K = (window tap, input channel c). The A tile is gathered
// from x while it is loaded (no im2col buffer; padding taps read 0). When the group's channels come in
// runs of 8 (RUNS = 1) the 8 k of a step share one tap: each thread decodes it once per step and reads
// its channels at a fixed stride; otherwise every element decodes its own (gather_a).
// One BM x BN output tile per 16 x 16 workgroup, K in steps of 8: the next step's loads go to
// registers while this one is summed, then into the other of two workgroup buffers (one barrier per
// step). Thread (tx, ty) owns positions m0 + 4tx + 64h + i (i < 4, h < BM/64) and channels
// o0 + ty*TN + j (j < TN = BN/16), each read as one vector per k: 64 consecutive positions of a channel
// are stored by 16 neighbouring threads. Its loads: A row am, k rows ak + r*256/BM; w channel
// wo + 32r, k row wk.
// Split-K (few output tiles): grid z = groups * splits, split s sums K in [s*k_chunk, (s+1)*k_chunk)
// and stores its raw sums at part + s*total (y's layout); conv_split_sum adds them up and finishes.
// MODE: forward or transposed conv (include/conv_window_*). Bindings: 0 = arena window (u32 words),
// 1 = ConvParams (element offsets; 3-D geometry; m_start = the first row of this dispatch).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_taps.wgsl"
#include "conv_epilogue.wgsl"

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = 8u;
// the window's size is part of the pipeline: the tap decode then divides by constants
const KH: u32 = {{KH}}u;
const KW: u32 = {{KW}}u;
const TN: u32 = {{TN}}u;  // channels per thread
const A_STEP: u32 = BK * BM / 4u;  // vec4s of one buffer of tile_a
const W_STEP: u32 = BK * BN / TN;

var<workgroup> tile_a: array<vec4<f32>, {{A_VECS}}>;  // [2][BK][BM/4]: 4 positions per vec4
var<workgroup> tile_w: array<{{W_TYPE}}, {{W_VECS}}>;  // [2][BK][BN/TN]: a thread's TN channels

// Offset inside one input channel of window tap `tap` (0 .. KVOL-1, row-major) of an output position.
fn window_offset(od: u32, oh: u32, ow: u32, tap: u32) -> i32 {
    return tap_offset(od, oh, ow, tap / (KW * KH), (tap / KW) % KH, tap % KW);
}

// A[m, k] of a row whose input row base (n*C_in + g*C_in/G) and output position are given.
fn gather_a(ok: bool, row: u32, od: u32, oh: u32, ow: u32, k: u32, in_size: u32) -> f32 {
    if (!ok || k >= p.kdim) {
        return 0.0;
    }
    let offset = window_offset(od, oh, ow, k / p.c_in_g);
    if (offset < 0) {
        return 0.0;
    }
    return ld_f32(p.x + (row + k % p.c_in_g) * in_size + u32(offset));
}

// W[o, k] of group g: output channel o of the group, k = (tap, c).
fn gather_w(g: u32, o: u32, k: u32) -> f32 {
    if (k >= p.kdim) {
        return 0.0;
    }
    return load_w(g, o, k % p.c_in_g, k / p.c_in_g);
}
fn load_w(g: u32, o: u32, c: u32, tap: u32) -> f32 {
    if (o >= p.c_out_g) {
        return 0.0;
    }
    return ld_f32(p.w + w_index(g, o, c, tap));
}

fn store_y(g: u32, split: u32, m: u32, o: u32, acc: f32) {
    if (m >= p.m || o >= p.c_out_g) {
        return;
    }
    let co = g * p.c_out_g + o;
    let index = ((m / p.positions) * p.c_out + co) * p.positions + m % p.positions;
    if (p.splits > 1u) {
        st_f32(p.part + split * p.total + index, acc);  // a partial sum: conv_split_sum finishes it
    } else {
        st_f32(p.y + index, finish(co, acc));
    }
}

// Rows m .. m+3 of channel o.
fn store4(g: u32, split: u32, m: u32, o: u32, acc: vec4<f32>) {
    store_y(g, split, m, o, acc.x);
    store_y(g, split, m + 1u, o, acc.y);
    store_y(g, split, m + 2u, o, acc.z);
    store_y(g, split, m + 3u, o, acc.w);
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
    let flat = ty * 16u + tx;
    let g = wid.z % p.groups;
    let split = wid.z / p.groups;
    let k_begin = split * p.k_chunk;
    let m0 = p.m_start + wid.x * BM;
    let o0 = wid.y * BN;
    // this thread's A row, fixed for the whole K loop: its output position decoded once
    let am = flat % BM;
    let ak = flat / BM;
    let ok = m0 + am < p.m;
    let pos = (m0 + am) % p.positions;
    let row = ((m0 + am) / p.positions) * p.c_in + g * p.c_in_g;
    let ow = pos % p.out_w;
    let oh = (pos / p.out_w) % p.out_h;
    let od = pos / (p.out_w * p.out_h);
    let wk = flat % BK;
    let wo = flat / BK;
    let in_size = p.in_d * p.in_h * p.in_w;
{{REGS}}
    var acc = array<vec4<f32>, {{ACC}}>();
    var k0 = k_begin;
    var b = 0u;
{{LOAD}}
{{STAGE}}
    workgroupBarrier();
    let steps = (min(p.k_chunk, p.kdim - k_begin) + BK - 1u) / BK;
    for (var s = 0u; s < steps; s = s + 1u) {
        let more = s + 1u < steps;
        if (more) {  // issued before the sums below, so the loads' latency hides behind them
            k0 = k_begin + (s + 1u) * BK;
{{LOAD}}
        }
        let ta = (s & 1u) * A_STEP + tx;
        let tb = (s & 1u) * W_STEP + ty;
{{FMA}}
        if (more) {  // the other buffer: everyone finished reading it before the last barrier
            b = (s + 1u) & 1u;
{{STAGE}}
        }
        workgroupBarrier();
    }
{{STORE}}
}

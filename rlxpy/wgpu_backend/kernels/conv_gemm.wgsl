// y = act(conv(x, w) + bias) as an implicit GEMM per group (grid z): rows m = (n, output position),
// columns o = the group's output channels, K = (window tap, input channel c). The A tile is gathered
// from x while it is loaded (no im2col buffer; padding taps read 0). When the group's channels come in
// runs of BK the BK k of a step share one tap: each thread decodes it once per step and reads its
// channels at a fixed stride; otherwise every element decodes its own (gather_a).
// One BM x BN output tile per 16 x 16 workgroup, K in steps of BK (8 or 16): the next step's loads go to
// registers while this one is summed, then into the other of two workgroup buffers (one barrier per
// step). Thread (tx, ty) owns positions m0 + 4tx + 64h + i (i < 4, h < BM/64) and channels
// o0 + ty*TN + j (j < TN = BN/16), read as WV vectors of WL channels per k: 64 consecutive positions of
// a channel are stored by 16 neighbouring threads. Its loads: A row t.am (include/conv_gemm_rows), k
// rows t.ak + r*256/BM; w channel wo + r*256/BK, k row wk.
// Split-K (few output tiles): grid z = groups * splits, split s sums K in [s*k_chunk, (s+1)*k_chunk)
// and stores its raw sums at part + s*total (y's layout); conv_split_sum adds them up and finishes.
// MODE: forward or transposed conv (include/conv_window_*). Bindings: 0 = arena window (u32 words),
// 1 = ConvParams (element offsets; 3-D geometry; m_start = the first row of this dispatch).
#include "common_arena.wgsl"
#include "conv_gemm_store.wgsl"
#include "conv_gemm_rows.wgsl"

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;  // k per step
// the window's size is part of the pipeline: the tap decode then divides by constants
const KH: u32 = {{KH}}u;
const KW: u32 = {{KW}}u;
const TN: u32 = {{TN}}u;  // channels per thread
const WL: u32 = {{WL}}u;  // channels per vector of tile_w
const WV: u32 = TN / WL;  // tile_w vectors per thread and k
const A_STEP: u32 = BK * BM / 4u;  // vec4s of one buffer of tile_a
const W_STEP: u32 = BK * BN / WL;

var<workgroup> tile_a: array<vec4<f32>, {{A_VECS}}>;  // [2][BK][BM/4]: 4 positions per vec4
var<workgroup> tile_w: array<{{W_TYPE}}, {{W_VECS}}>;  // [2][BK][BN/WL]: a thread's TN channels, WV vectors

// The group's input channels: a pipeline constant where every element decodes its own k (the tap
// and channel of k then divide by a constant), the uniform otherwise.
fn c_in_g() -> u32 {
    return {{CIN_G}};
}

// Offset inside one input channel of window tap `tap` (0 .. KVOL-1, row-major) of row t's position.
fn window_offset(t: GemmRow, tap: u32) -> i32 {
    return tap_offset(t.od, t.oh, t.ow, tap / (KW * KH), (tap / KW) % KH, tap % KW);
}

// A[m, k] of row t.
fn gather_a(t: GemmRow, k: u32, in_size: u32) -> f32 {
    if (!t.ok || k >= p.kdim) {
        return 0.0;
    }
    let offset = window_offset(t, k / c_in_g());
    if (offset < 0) {
        return 0.0;
    }
    return ld_f32(p.x + (t.row + k % c_in_g()) * in_size + u32(offset));
}

// W[o, k] of group g: output channel o of the group, k = (tap, c).
fn gather_w(g: u32, o: u32, k: u32) -> f32 {
    if (k >= p.kdim) {
        return 0.0;
    }
    return load_w(g, o, k % c_in_g(), k / c_in_g());
}
fn load_w(g: u32, o: u32, c: u32, tap: u32) -> f32 {
    if (o >= p.c_out_g) {
        return 0.0;
    }
    return ld_f32(p.w + w_index(g, o, c, tap));
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
#include "conv_gemm_entry.wgsl"
    let k_begin = split * p.k_chunk;
    let wk = flat % BK;
    let wo = flat / BK;
    var k0 = k_begin;
    let steps = (min(p.k_chunk, p.kdim - k_begin) + BK - 1u) / BK;
#include "conv_gemm_loop.wgsl"
}

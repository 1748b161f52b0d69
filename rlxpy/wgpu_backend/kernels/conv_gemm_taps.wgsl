// y = act(conv(x, w) + bias) as an implicit GEMM per group (grid z) for windows of a few taps (1x1,
// 3x3, ...): rows m = (n, output position), columns o = the group's output channels, K = (input
// channel c, window tap t), channel-major. A K step is CB whole input channels, BK = CB * KVOL k: a
// conv's weights of one output channel in a step are BK consecutive words of w, and a thread's A and w
// elements are the same (channel of the step, tap) pairs in every step, so their offsets (inside an
// input channel, -1 in the padding or past BK; inside w, for the step's first channel) are computed
// once, before the K loop: a step adds c0 times a channel's stride (no im2col buffer, no decode).
// One BM x BN output tile per 16 x 16 workgroup; the next step's loads go to registers while this one
// is summed, then into the other of two workgroup buffers (one barrier per step). Thread (tx, ty) owns
// positions m0 + 4tx + 64h + i (i < 4, h < BM/64) and channels o0 + ty*TN + j (j < TN = BN/16), read
// as one vec4 of positions and TN/WL vectors of WL channels per k.
// Split-K (few output tiles): grid z = groups * splits, split s sums the input channels
// [s*k_chunk, (s+1)*k_chunk) and stores raw sums at part + s*total; conv_split_sum finishes them.
// MODE: forward or transposed conv (include/conv_window_*). Bindings: 0 = arena window (u32 words),
// 1 = ConvParams (element offsets; 3-D geometry; m_start = the first row of this dispatch; k_chunk in
// input channels).
#include "common_arena.wgsl"
#include "conv_gemm_store.wgsl"
#include "conv_gemm_rows.wgsl"

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const CB: u32 = {{CB}}u;  // input channels per K step
const KH: u32 = {{KH}}u;  // the window is part of the pipeline: the tap decode divides by constants
const KW: u32 = {{KW}}u;
const KVOL: u32 = {{KVOL}}u;
const BK: u32 = CB * KVOL;
const TN: u32 = {{TN}}u;  // channels per thread
const WL: u32 = {{WL}}u;  // channels per vector of tile_w
const WV: u32 = TN / WL;  // vectors per thread and k
const A_STEP: u32 = BK * BM / 4u;  // vec4s of one buffer of tile_a
const W_STEP: u32 = BK * BN / WL;

var<workgroup> tile_a: array<vec4<f32>, {{A_VECS}}>;  // [2][BK][BM/4]: 4 positions per vec4
var<workgroup> tile_w: array<{{W_TYPE}}, {{W_VECS}}>;  // [2][BK][BN/WL]

// Offset inside one input channel of k row `k` of a step (tap k % KVOL) for row t's position; -1 in
// the padding, past the step's BK rows or past the last row.
fn k_offset(t: GemmRow, k: u32) -> i32 {
    if (!t.ok || k >= BK) {
        return -1;
    }
    let tap = k % KVOL;
    return tap_offset(t.od, t.oh, t.ow, tap / (KW * KH), (tap / KW) % KH, tap % KW);
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
#include "conv_gemm_entry.wgsl"
    let c_begin = split * p.k_chunk;
    let c_end = min(c_begin + p.k_chunk, p.c_in_g);
    let x_row = p.x + t.row * in_size;
    let w_step = w_channel_stride();
{{SETUP}}
    var c0 = c_begin;
    let steps = (c_end - c_begin + CB - 1u) / CB;
#include "conv_gemm_loop.wgsl"
}

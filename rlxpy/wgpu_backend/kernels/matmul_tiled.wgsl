// y[b] = act(a[b] @ w[b] + bias): f32 GEMM, one BM x BN output tile per 16 x 16 workgroup, K in steps of 8.
// Split K: grid z = the split, which sums k_len of a's k columns and w's rows (the strides step to its
// chunk) into its own y block, summed by matmul_split_sum; unsplit, k_len = k and z = the batch.
// Thread (tx, ty) owns rows ty*4 + 64h + i and cols tx*4 + 64g + j (i, j < 4; h < BM/64, g < BN/64), so
// each of its workgroup-memory reads is a vec4; the next K step is loaded into registers while this one
// is summed, then stored to the other of two workgroup buffers (one barrier per step). Grid z = batch.
// TRANS_A / TRANS_B: a is stored [K, M] / w is stored [N, K] (MatMul's transpose_a / transpose_b), read
// in place (include/matmul_transposed_*): a thread loads 4 rows of a at one k, or 4 k of one w column.
// Bindings: 0 = arena window (vec4 or single words: matmul_access_*), 1 = MatmulTiledParams (element
// offsets, batch strides).
#include "matmul_access_{{ACCESS}}.wgsl"
#include "matmul_y_index.wgsl"
#include "matmul_transposed_{{ACCESS}}.wgsl"
#include "common_math.wgsl"

const TRANS_A: bool = {{TRANS_A}};
const TRANS_B: bool = {{TRANS_B}};

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = 8u;
const A_STEP: u32 = BK * BM / 4u;  // vec4s of one buffer of tile_a
const W_STEP: u32 = BK * BN / 4u;

var<workgroup> tile_a: array<vec4<f32>, {{A_VECS}}>;  // [2][BK][BM] a, transposed: 4 rows per vec4
var<workgroup> tile_w: array<vec4<f32>, {{W_VECS}}>;  // [2][BK][BN] w

fn epilogue(v: f32) -> f32 {
    return {{EXPR}};
}

// Bias, activation and store of 4 outputs: row `row`, columns col .. col+3.
fn finish(y_base: u32, row: u32, col: u32, acc: vec4<f32>) {
    if (row >= p.m || col >= p.n) {
        return;
    }
    var v = acc;
    if (p.has_bias == 1u) {
        v = v + load_bias(col);
    }
    store_y(y_base, row, col, vec4<f32>(epilogue(v.x), epilogue(v.y), epilogue(v.z), epilogue(v.w)));
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
    let flat = ty * 16u + tx;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let a_base = p.a + wid.z * p.stride_a;
    let w_base = p.w + wid.z * p.stride_w;
    // this thread's share of a K step: a[row0 + ar, k0 + ak ..+3] and w[k0 + wk, col0 + wc ..+3]; transposed,
    // a[row0 + ar ..+3, k0 + ak] and w[k0 + wk ..+3, col0 + wc]
    let loads_a = flat < 2u * BM;
    let loads_w = flat < 2u * BN;
    var ar = flat / 2u;
    var ak = (flat % 2u) * 4u;
    if (TRANS_A) {
        ak = flat / (BM / 4u);
        ar = (flat % (BM / 4u)) * 4u;
    }
    var wk = flat / (BN / 4u);
    var wc = (flat % (BN / 4u)) * 4u;
    if (TRANS_B) {
        wc = flat / 2u;
        wk = (flat % 2u) * 4u;
    }
    var acc = array<vec4<f32>, {{ACC}}>();
    var next_a = vec4<f32>();
    var next_w = vec4<f32>();
    if (loads_a) {
        next_a = fetch_a(a_base, row0 + ar, ak);
    }
    if (loads_w) {
        next_w = fetch_w(w_base, wk, col0 + wc);
    }
    stage(0u, loads_a, loads_w, ar, ak, wk, wc, next_a, next_w);
    workgroupBarrier();
    let steps = (p.k_len + BK - 1u) / BK;
    for (var s = 0u; s < steps; s = s + 1u) {
        let more = s + 1u < steps;
        if (more) {  // issued before the sums below, so the loads' latency hides behind them
            let k0 = (s + 1u) * BK;
            if (loads_a) {
                next_a = fetch_a(a_base, row0 + ar, k0 + ak);
            }
            if (loads_w) {
                next_w = fetch_w(w_base, k0 + wk, col0 + wc);
            }
        }
        let ta = (s & 1u) * A_STEP + ty;
        let tw = (s & 1u) * W_STEP + tx;
{{FMA}}
        if (more) {  // the other buffer: everyone finished reading it before the last barrier
            stage((s + 1u) & 1u, loads_a, loads_w, ar, ak, wk, wc, next_a, next_w);
        }
        workgroupBarrier();
    }
    let y_base = p.y + wid.z * p.stride_y;
    let row = row0 + ty * 4u;
    let col = col0 + tx * 4u;
{{STORE}}
}

// a's 4 values at (row, k): a[row, k ..+3], or transposed a[row ..+3, k]
fn fetch_a(base: u32, row: u32, k: u32) -> vec4<f32> {
    if (TRANS_A) {
        return load_a_t(base, row, k);
    }
    return load_a(base, row, k);
}

// w's 4 values at (k, col): w[k, col ..+3], or transposed w[k ..+3, col]
fn fetch_w(base: u32, k: u32, col: u32) -> vec4<f32> {
    if (TRANS_B) {
        return load_w_t(base, k, col);
    }
    return load_w(base, k, col);
}

// Registers -> workgroup buffer `b`: a k-major so the sums read 4 rows as one vec4 (4 k of a row go to
// 4 vec4s; 4 rows of a transposed a are one), w row-major (4 k of a transposed w's column go to 4 vec4s).
fn stage(b: u32, loads_a: bool, loads_w: bool, ar: u32, ak: u32, wk: u32, wc: u32, va: vec4<f32>,
         vw: vec4<f32>) {
    if (loads_a && TRANS_A) {
        tile_a[b * A_STEP + ak * (BM / 4u) + ar / 4u] = va;
    } else if (loads_a) {
        let at = b * A_STEP + ar / 4u;
        let lane = ar % 4u;
        tile_a[at + ak * (BM / 4u)][lane] = va.x;
        tile_a[at + (ak + 1u) * (BM / 4u)][lane] = va.y;
        tile_a[at + (ak + 2u) * (BM / 4u)][lane] = va.z;
        tile_a[at + (ak + 3u) * (BM / 4u)][lane] = va.w;
    }
    if (loads_w && TRANS_B) {
        let wt = b * W_STEP + wc / 4u;
        let lane = wc % 4u;
        tile_w[wt + wk * (BN / 4u)][lane] = vw.x;
        tile_w[wt + (wk + 1u) * (BN / 4u)][lane] = vw.y;
        tile_w[wt + (wk + 2u) * (BN / 4u)][lane] = vw.z;
        tile_w[wt + (wk + 3u) * (BN / 4u)][lane] = vw.w;
    } else if (loads_w) {
        tile_w[b * W_STEP + wk * (BN / 4u) + wc / 4u] = vw;
    }
}

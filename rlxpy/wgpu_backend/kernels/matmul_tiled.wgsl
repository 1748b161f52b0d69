// y[b] = act(a[b] @ w[b] + bias): f32 GEMM, one BM x BN output tile per 16 x 16 workgroup, K in steps of BK.
// Split K: grid z = the split, which sums k_len of a's k columns and w's rows (the strides step to its
// chunk) into its own y block, summed by matmul_split_sum; unsplit, k_len = k and z = the batch.
// Thread (tx, ty) owns rows ty*4 + 64h + i and cols tx*4 + 64g + j (i, j < 4; h < BM/64, g < BN/64), so
// each of its workgroup-memory reads is a vec4; the next K step is loaded into registers while this one
// is summed, then stored to the other of two workgroup buffers (one barrier per step). Grid z = batch.
// A step moves BK*BM/4 vec4s of a and BK*BN/4 of w: thread `flat` moves vec4 number flat + 256 r of
// each (r < A_LOADS / W_LOADS, the lowerer's counts).
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
const BK: u32 = {{BK}}u;
const A_STEP: u32 = BK * BM / 4u;  // vec4s of one buffer of tile_a
const W_STEP: u32 = BK * BN / 4u;

var<workgroup> tile_a: array<vec4<f32>, {{A_VECS}}>;  // [2][BK][BM] a, transposed: 4 rows per vec4
var<workgroup> tile_w: array<vec4<f32>, {{W_VECS}}>;  // [2][BK][BN] w

// One step's a and w vec4s in registers, between their loads and their store into workgroup memory.
struct Staged {
    a: array<vec4<f32>, {{A_LOADS}}>,
    w: array<vec4<f32>, {{W_LOADS}}>,
}

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
    var acc = array<vec4<f32>, {{ACC}}>();
    var next = fetch_step(a_base, w_base, row0, col0, 0u, flat);
    stage(0u, flat, next);
    workgroupBarrier();
    let steps = (p.k_len + BK - 1u) / BK;
    for (var s = 0u; s < steps; s = s + 1u) {
        let more = s + 1u < steps;
        if (more) {  // issued before the sums below, so the loads' latency hides behind them
            next = fetch_step(a_base, w_base, row0, col0, (s + 1u) * BK, flat);
        }
        let ta = (s & 1u) * A_STEP + ty;
        let tw = (s & 1u) * W_STEP + tx;
{{FMA}}
        if (more) {  // the other buffer: everyone finished reading it before the last barrier
            stage((s + 1u) & 1u, flat, next);
        }
        workgroupBarrier();
    }
    let y_base = p.y + wid.z * p.stride_y;
    let row = row0 + ty * 4u;
    let col = col0 + tx * 4u;
{{STORE}}
}

// The tile position of a's vec4 number `v` of a step: (row, k) of a[row, k ..+3], or transposed of
// a[row ..+3, k]; likewise (k, col) of w's w[k, col ..+3], or transposed w[k ..+3, col].
fn a_spot(v: u32) -> vec2<u32> {
    if (TRANS_A) {
        return vec2<u32>((v % (BM / 4u)) * 4u, v / (BM / 4u));
    }
    return vec2<u32>(v / (BK / 4u), (v % (BK / 4u)) * 4u);
}
fn w_spot(v: u32) -> vec2<u32> {
    if (TRANS_B) {
        return vec2<u32>((v % (BK / 4u)) * 4u, v / (BK / 4u));
    }
    return vec2<u32>(v / (BN / 4u), (v % (BN / 4u)) * 4u);
}

// This thread's vec4s of the step at k0 (zero outside the matrices).
fn fetch_step(a_base: u32, w_base: u32, row0: u32, col0: u32, k0: u32, flat: u32) -> Staged {
    var got: Staged;
    for (var r = 0u; r < {{A_LOADS}}u; r = r + 1u) {
        let v = flat + 256u * r;
        let at = a_spot(v);
        if (v < A_STEP && TRANS_A) {
            got.a[r] = load_a_t(a_base, row0 + at.x, k0 + at.y);
        } else if (v < A_STEP) {
            got.a[r] = load_a(a_base, row0 + at.x, k0 + at.y);
        }
    }
    for (var r = 0u; r < {{W_LOADS}}u; r = r + 1u) {
        let v = flat + 256u * r;
        let wt = w_spot(v);
        if (v < W_STEP && TRANS_B) {
            got.w[r] = load_w_t(w_base, k0 + wt.x, col0 + wt.y);
        } else if (v < W_STEP) {
            got.w[r] = load_w(w_base, k0 + wt.x, col0 + wt.y);
        }
    }
    return got;
}

// Registers -> workgroup buffer `b`: a k-major so the sums read 4 rows as one vec4 (4 k of a row go to
// 4 vec4s; 4 rows of a transposed a are one), w row-major (4 k of a transposed w's column go to 4 vec4s).
fn stage(b: u32, flat: u32, got: Staged) {
    for (var r = 0u; r < {{A_LOADS}}u; r = r + 1u) {
        let v = flat + 256u * r;
        let at = a_spot(v);
        let va = got.a[r];
        if (v < A_STEP && TRANS_A) {
            tile_a[b * A_STEP + at.y * (BM / 4u) + at.x / 4u] = va;
        } else if (v < A_STEP) {
            let first = b * A_STEP + at.y * (BM / 4u) + at.x / 4u;
            let lane = at.x % 4u;
            tile_a[first][lane] = va.x;
            tile_a[first + BM / 4u][lane] = va.y;
            tile_a[first + 2u * (BM / 4u)][lane] = va.z;
            tile_a[first + 3u * (BM / 4u)][lane] = va.w;
        }
    }
    for (var r = 0u; r < {{W_LOADS}}u; r = r + 1u) {
        let v = flat + 256u * r;
        let wt = w_spot(v);
        let vw = got.w[r];
        if (v < W_STEP && TRANS_B) {
            let first = b * W_STEP + wt.x * (BN / 4u) + wt.y / 4u;
            let lane = wt.y % 4u;
            tile_w[first][lane] = vw.x;
            tile_w[first + BN / 4u][lane] = vw.y;
            tile_w[first + 2u * (BN / 4u)][lane] = vw.z;
            tile_w[first + 3u * (BN / 4u)][lane] = vw.w;
        } else if (v < W_STEP) {
            tile_w[b * W_STEP + wt.x * (BN / 4u) + wt.y / 4u] = vw;
        }
    }
}

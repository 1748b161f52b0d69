// matmul_tiled's body (kernels matmul_tiled and quant_gguf_gemm; see matmul_tiled.wgsl): the including
// kernel first brings the arena access (load_a, load_w, load_bias, store_y: include/matmul_access_*)
// and the transposed loads (load_a_t, load_w_t: include/matmul_transposed_*, or the GGUF weight's).
#include "matmul_y_index.wgsl"
#include "common_math.wgsl"

const TRANS_A: bool = {{TRANS_A}};
const TRANS_B: bool = {{TRANS_B}};

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
const A_STEP: u32 = BK * BM / 4u;  // vec4s of one buffer of tile_a
const W_STEP: u32 = BK * BN / 4u;
const GROUP_ROWS: u32 = {{GROUP_ROWS}}u;

// [buffer * BK + k][BM / 4]: a transposed, 4 rows per vec4; [buffer * BK + k][BN / 4]: w
var<workgroup> tile_a: array<array<vec4<f32>, {{A_COLS}}>, {{K_ROWS}}>;
var<workgroup> tile_w: array<array<vec4<f32>, {{W_COLS}}>, {{K_ROWS}}>;

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

// The (row, column) tile of workgroup `wid` of a grid of `groups`: as dispatched, or banded.
fn tile_of(wid: vec3<u32>, groups: vec3<u32>) -> vec2<u32> {
    if (GROUP_ROWS == 0u) {
        return wid.yx;
    }
    let id = wid.y * groups.x + wid.x;
    let band = groups.x * GROUP_ROWS;
    let first = (id / band) * GROUP_ROWS;
    let rows = min(groups.y - first, GROUP_ROWS);
    let inside = id % band;
    return vec2<u32>(first + inside % rows, inside / rows);
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
    let flat = ty * 16u + tx;
    let tile = tile_of(wid, groups);
    let row0 = tile.x * BM;
    let col0 = tile.y * BN;
    let a_base = p.a + wid.z * p.stride_a;
    let w_base = p.w + wid.z * p.stride_w;
{{ACC}}
{{FIRST}}
    workgroupBarrier();
    let steps = (p.k_len + BK - 1u) / BK;
{{K_LOOP}}
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

// Vec4 number v of a's part of the step at k0, and of w's (zero outside the matrices or past the step).
fn fetch_a(a_base: u32, row0: u32, k0: u32, v: u32) -> vec4<f32> {
    let at = a_spot(v);
    var va: vec4<f32>;
    if (TRANS_A) {
        va = load_a_t(a_base, row0 + at.x, k0 + at.y);
    } else {
        va = load_a(a_base, row0 + at.x, k0 + at.y);
    }
    return select(vec4<f32>(), va, v < A_STEP);
}
fn fetch_w(w_base: u32, col0: u32, k0: u32, v: u32) -> vec4<f32> {
    let wt = w_spot(v);
    var vw: vec4<f32>;
    if (TRANS_B) {
        vw = load_w_t(w_base, k0 + wt.x, col0 + wt.y);
    } else {
        vw = load_w(w_base, k0 + wt.x, col0 + wt.y);
    }
    return select(vec4<f32>(), vw, v < W_STEP);
}

// Registers -> workgroup buffer `b`: a k-major so the sums read 4 rows as one vec4 (4 k of a row go to
// 4 vec4s; 4 rows of a transposed a are one), w row-major (4 k of a transposed w's column go to 4 vec4s).
fn stage_a(b: u32, v: u32, va: vec4<f32>) {
    let at = a_spot(v);
    let k = b * BK + at.y;
    if (v < A_STEP && TRANS_A) {
        tile_a[k][at.x / 4u] = va;
    } else if (v < A_STEP) {
        let lane = at.x % 4u;
        tile_a[k][at.x / 4u][lane] = va.x;
        tile_a[k + 1u][at.x / 4u][lane] = va.y;
        tile_a[k + 2u][at.x / 4u][lane] = va.z;
        tile_a[k + 3u][at.x / 4u][lane] = va.w;
    }
}
fn stage_w(b: u32, v: u32, vw: vec4<f32>) {
    let wt = w_spot(v);
    let k = b * BK + wt.x;
    if (v < W_STEP && TRANS_B) {
        let lane = wt.y % 4u;
        tile_w[k][wt.y / 4u][lane] = vw.x;
        tile_w[k + 1u][wt.y / 4u][lane] = vw.y;
        tile_w[k + 2u][wt.y / 4u][lane] = vw.z;
        tile_w[k + 3u][wt.y / 4u][lane] = vw.w;
    } else if (v < W_STEP) {
        tile_w[k][wt.y / 4u] = vw;
    }
}

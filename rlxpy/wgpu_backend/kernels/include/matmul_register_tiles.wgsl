// A register-tiled f32 GEMM core's buffers and loads (matmul_tiled's technique): 16 x 16 threads sum
// one BM x BN output tile of a @ w over K in steps of RT_K (8 or 16). Thread (tx, ty) owns rows
// 4 ty + 64 h + i and columns 4 tx + 64 g + j (i, j < 4), so each workgroup-memory read in the sums is
// a vec4. The including kernel runs the K loop in its entry point, written out by lowering/matmul_core
// (named accumulators, constant tile rows): the next step's a and w vec4s are loaded into registers
// before this step is summed, then stored into the other of two workgroup buffers with rt_put (one
// barrier per step). It declares BM and BN (multiples of 64); the lowerer fills RT_K and RT_ROWS
// (2 RT_K: both buffers), with RT_K * BM / 4 and RT_K * BN / 4 at most 256 (each thread moves at most
// one vec4 of each operand per step).
const RT_K: u32 = {{RT_K}}u;
const RT_A_STEP: u32 = RT_K * BM / 4u;  // vec4s of one buffer of rt_a
const RT_W_STEP: u32 = RT_K * BN / 4u;

var<workgroup> rt_a: array<array<vec4<f32>, {{RT_A_COLS}}>, {{RT_ROWS}}>;  // [2 RT_K][BM / 4]: a transposed
var<workgroup> rt_w: array<array<vec4<f32>, {{RT_W_COLS}}>, {{RT_ROWS}}>;  // [2 RT_K][BN / 4]

// What one thread moves per step: a[tile row ar, k0 + ak .. +3] (threads < RT_K BM / 4) and
// w[k0 + wk, col0 + wc .. +3] (threads < RT_K BN / 4).
struct RtShare {
    loads_a: bool,
    loads_w: bool,
    ar: u32,
    ak: u32,
    wk: u32,
    wc: u32,
}

fn rt_share(flat: u32) -> RtShare {
    return RtShare(flat < RT_A_STEP, flat < RT_W_STEP, flat / (RT_K / 4u), (flat % (RT_K / 4u)) * 4u,
                   flat / (BN / 4u), (flat % (BN / 4u)) * 4u);
}

// The registers of one step into buffer `half` (a k-major, so the sums read 4 rows as one vec4).
fn rt_put(half: u32, s: RtShare, va: vec4<f32>, vw: vec4<f32>) {
    if (s.loads_a) {
        let k = half * RT_K + s.ak;
        let c = s.ar / 4u;
        rt_a[k][c][s.ar % 4u] = va.x;
        rt_a[k + 1u][c][s.ar % 4u] = va.y;
        rt_a[k + 2u][c][s.ar % 4u] = va.z;
        rt_a[k + 3u][c][s.ar % 4u] = va.w;
    }
    if (s.loads_w) {
        rt_w[half * RT_K + s.wk][s.wc / 4u] = vw;
    }
}

// A register-tiled f32 GEMM core (matmul_tiled's technique, as a function): 16 x 16 threads sum one
// BM x BN output tile of a @ w over K in steps of RT_K (8 or 16). Thread (tx, ty) owns rows
// 4 ty + 64 h + i and columns 4 tx + 64 g + j (i, j < 4), so each workgroup-memory read in the sums is
// a vec4. The next
// step's a and w vec4s are loaded into registers before this step is summed (their latency hides
// behind the FMAs), then stored into the other of two workgroup buffers: one barrier per step.
// The including kernel declares BM and BN (multiples of 64) and defines
//   rt_load_a(r, k): a[tile row r, k .. k+3] (zero past the tile's rows or past K),
//   rt_load_w(k, c): w[k, c .. c+3] for the absolute column c (zero past K or N);
// the placeholders RT_SUMS (the unrolled sums of one step: reads of rt_a[ta + ..] and rt_w[tw + ..],
// summed on their own and then added to acc, a blocked sum that keeps f32 rounding low over long K),
// RT_ACC (BM * BN / 1024 vec4 accumulators), RT_K, RT_A_LOADS / RT_W_LOADS and RT_A_VECS / RT_W_VECS
// (the two buffers' vec4s) come from the lowerer.
const RT_K: u32 = {{RT_K}}u;
const RT_A_STEP: u32 = RT_K * BM / 4u;  // vec4s of one buffer of rt_a
const RT_W_STEP: u32 = RT_K * BN / 4u;
const RT_A_LOADS: u32 = {{RT_A_LOADS}}u;  // vec4 loads of a and of w per thread and step
const RT_W_LOADS: u32 = {{RT_W_LOADS}}u;

var<workgroup> rt_a: array<vec4<f32>, {{RT_A_VECS}}>;  // [2][RT_K][BM / 4]: a transposed, 4 rows a vec4
var<workgroup> rt_w: array<vec4<f32>, {{RT_W_VECS}}>;  // [2][RT_K][BN / 4]

// One thread's share of a step: load u moves a[r, k0 + kq .. +3] for f = flat + 256 u < RT_A_STEP
// (r = f / (RT_K / 4), kq = 4 (f % (RT_K / 4))) and w[k0 + f / (BN / 4), col0 + 4 (f % (BN / 4)) .. +3].
struct RtLoads {
    va: array<vec4<f32>, RT_A_LOADS>,
    vw: array<vec4<f32>, RT_W_LOADS>,
}

fn rt_fetch(flat: u32, col0: u32, k0: u32) -> RtLoads {
    var l: RtLoads;
    for (var u = 0u; u < RT_A_LOADS; u = u + 1u) {
        let f = flat + 256u * u;
        if (f < RT_A_STEP) {
            l.va[u] = rt_load_a(f / (RT_K / 4u), k0 + 4u * (f % (RT_K / 4u)));
        }
    }
    for (var u = 0u; u < RT_W_LOADS; u = u + 1u) {
        let f = flat + 256u * u;
        if (f < RT_W_STEP) {
            l.vw[u] = rt_load_w(k0 + f / (BN / 4u), col0 + 4u * (f % (BN / 4u)));
        }
    }
    return l;
}

// The registers of one step into buffer `half` (a k-major, so the sums read 4 rows as one vec4).
fn rt_put(half: u32, flat: u32, l: RtLoads) {
    for (var u = 0u; u < RT_A_LOADS; u = u + 1u) {
        let f = flat + 256u * u;
        if (f < RT_A_STEP) {
            let r = f / (RT_K / 4u);
            let first = half * RT_A_STEP + 4u * (f % (RT_K / 4u)) * (BM / 4u) + r / 4u;
            for (var j = 0u; j < 4u; j = j + 1u) {
                rt_a[first + j * (BM / 4u)][r % 4u] = l.va[u][j];
            }
        }
    }
    for (var u = 0u; u < RT_W_LOADS; u = u + 1u) {
        let f = flat + 256u * u;
        if (f < RT_W_STEP) {
            rt_w[half * RT_W_STEP + f] = l.vw[u];
        }
    }
}

// The tile's sums over k in [0, k_len): acc[(4 h + i) * (BN / 64) + g] holds row 4 ty + 64 h + i,
// columns col0 + 4 tx + 64 g .. +3. Call from uniform control flow (it has barriers).
fn rt_sums(flat: u32, tx: u32, ty: u32, col0: u32, k_len: u32) -> array<vec4<f32>, {{RT_ACC}}> {
    var acc = array<vec4<f32>, {{RT_ACC}}>();
    var l = rt_fetch(flat, col0, 0u);
    rt_put(0u, flat, l);
    workgroupBarrier();
    let steps = (k_len + RT_K - 1u) / RT_K;
    for (var step = 0u; step < steps; step = step + 1u) {
        let ahead = step + 1u < steps;
        if (ahead) {
            l = rt_fetch(flat, col0, (step + 1u) * RT_K);
        }
        let ta = (step & 1u) * RT_A_STEP + ty;
        let tw = (step & 1u) * RT_W_STEP + tx;
{{RT_SUMS}}
        if (ahead) {  // the other buffer: every thread finished reading it before the last barrier
            rt_put((step + 1u) & 1u, flat, l);
        }
        workgroupBarrier();
    }
    return acc;
}

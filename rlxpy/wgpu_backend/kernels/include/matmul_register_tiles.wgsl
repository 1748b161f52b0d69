// A register-tiled f32 GEMM core (matmul_tiled's technique, as a function): 16 x 16 threads sum one
// BM x BN output tile of a @ w over K in steps of RT_K = 8. Thread (tx, ty) owns rows 4 ty + 64 h + i and
// columns 4 tx + 64 g + j (i, j < 4), so each workgroup-memory read in the sums is a vec4. The next
// step's a and w vec4s are loaded into registers before this step is summed (their latency hides
// behind the FMAs), then stored into the other of two workgroup buffers: one barrier per step.
// The including kernel declares BM and BN (multiples of 64) and defines
//   rt_load_a(r, k): a[tile row r, k .. k+3] (zero past the tile's rows or past K),
//   rt_load_w(k, c): w[k, c .. c+3] for the absolute column c (zero past K or N);
// the placeholders RT_SUMS (the unrolled sums of one step: reads of rt_a[ta + ..] and rt_w[tw + ..],
// summed on their own and then added to acc, a blocked sum that keeps f32 rounding low over long K), RT_ACC (BM * BN / 64 accumulators) and RT_A_VECS / RT_W_VECS (the two buffers' vec4s) come
// from the lowerer.
const RT_K: u32 = 8u;
const RT_A_STEP: u32 = RT_K * BM / 4u;  // vec4s of one buffer of rt_a
const RT_W_STEP: u32 = RT_K * BN / 4u;

var<workgroup> rt_a: array<vec4<f32>, {{RT_A_VECS}}>;  // [2][RT_K][BM / 4]: a transposed, 4 rows a vec4
var<workgroup> rt_w: array<vec4<f32>, {{RT_W_VECS}}>;  // [2][RT_K][BN / 4]

// What one thread moves per step: a[ar, k0 + ak .. +3] (threads < 2 BM) and w[k0 + wk, wc .. +3].
struct RtShare {
    loads_a: bool,
    loads_w: bool,
    ar: u32,
    ak: u32,
    wk: u32,
    wc: u32,
}

fn rt_share(flat: u32) -> RtShare {
    return RtShare(flat < 2u * BM, flat < 2u * BN, flat / 2u, (flat % 2u) * 4u, flat / (BN / 4u),
                   (flat % (BN / 4u)) * 4u);
}

// The registers of one step into buffer `half` (a k-major, so the sums read 4 rows as one vec4).
fn rt_put(half: u32, s: RtShare, va: vec4<f32>, vw: vec4<f32>) {
    if (s.loads_a) {
        let first = half * RT_A_STEP + s.ak * (BM / 4u) + s.ar / 4u;
        for (var j = 0u; j < 4u; j = j + 1u) {
            rt_a[first + j * (BM / 4u)][s.ar % 4u] = va[j];
        }
    }
    if (s.loads_w) {
        rt_w[half * RT_W_STEP + s.wk * (BN / 4u) + s.wc / 4u] = vw;
    }
}

// The tile's sums over k in [0, k_len): acc[(4 h + i) * (BN / 64) + g] holds row 4 ty + 64 h + i,
// columns col0 + 4 tx + 64 g .. +3. Call from uniform control flow (it has barriers).
fn rt_sums(flat: u32, tx: u32, ty: u32, col0: u32, k_len: u32) -> array<vec4<f32>, {{RT_ACC}}> {
    let s = rt_share(flat);
    var acc = array<vec4<f32>, {{RT_ACC}}>();
    var va = vec4<f32>();
    var vw = vec4<f32>();
    if (s.loads_a) {
        va = rt_load_a(s.ar, s.ak);
    }
    if (s.loads_w) {
        vw = rt_load_w(s.wk, col0 + s.wc);
    }
    rt_put(0u, s, va, vw);
    workgroupBarrier();
    let steps = (k_len + RT_K - 1u) / RT_K;
    for (var step = 0u; step < steps; step = step + 1u) {
        let ahead = step + 1u < steps;
        if (ahead) {
            let k1 = (step + 1u) * RT_K;
            if (s.loads_a) {
                va = rt_load_a(s.ar, k1 + s.ak);
            }
            if (s.loads_w) {
                vw = rt_load_w(k1 + s.wk, col0 + s.wc);
            }
        }
        let ta = (step & 1u) * RT_A_STEP + ty;
        let tw = (step & 1u) * RT_W_STEP + tx;
{{RT_SUMS}}
        if (ahead) {  // the other buffer: every thread finished reading it before the last barrier
            rt_put((step + 1u) & 1u, s, va, vw);
        }
        workgroupBarrier();
    }
    return acc;
}

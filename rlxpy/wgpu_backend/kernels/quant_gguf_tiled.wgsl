// y[r, j] = sum_i x[r, i] * dequant(W)[j, i] for many x rows (prefill): W = GGML blocks read in place.
// A workgroup owns a BM x BN output tile. Its invocations form SK k-groups of (BN / 4) x (BM / TM);
// invocation (tx, ty) of k-group g owns rows ty*TM .. ty*TM+TM-1 and columns tx*4 .. tx*4+3 of the
// tile (TM x 4 accumulators, registers) over the k of each step that fall to g (BK / SK of them).
// Per step of BK k the x tile and the dequantised W tile go through workgroup memory, k-major
// ([BK][BM], [BK][BN] as vec4s), so each k's products read one vec4 of W and TM/4 vec4s of x for
// 4 * TM multiply-adds. The k-groups' partial tiles are summed through workgroup memory at the end:
// SK > 1 gives a small tile more invocations (more warps to hide latency with) at no extra dispatch.
// Double buffered: the next step's global loads are issued into registers before this step's
// products and stored to the other buffer at the top of the next step; one barrier per step.
// Bindings: 0 = arena window (u32 words; x, y word offsets, w a BYTE offset), 1 = QuantGgufTiledParams.
#include "common_arena.wgsl"
#include "quant_gguf_decode_{{DECODER}}.wgsl"
#include "quant_gguf_dq4.wgsl"

const BM: u32 = {{BM}}u;  // x rows per tile
const BN: u32 = {{BN}}u;  // weight rows (output columns) per tile
const TM: u32 = {{TM}}u;  // output rows per invocation
const BK: u32 = {{BK}}u;  // k per step (16 or 32; a multiple of 4: the decoders' chunk)
const SK: u32 = {{SK}}u;  // k-groups per workgroup
const GROUP: u32 = (BN / 4u) * (BM / TM);  // invocations per k-group
const THREADS: u32 = SK * GROUP;
const KG: u32 = BK / SK;  // k of a step per k-group
const XV: u32 = BM / 4u;  // vec4s per k of the x tile
const WV: u32 = BN / 4u;
const QK: u32 = BK / 4u;  // quads (4 consecutive k) per row and step

var<workgroup> xs: array<vec4<f32>, 2u * BK * XV>;
var<workgroup> ws: array<vec4<f32>, 2u * BK * WV>;

// Loads are branch-free (indices clamped, values selected after): a load under a branch is not
// hoisted, and one round trip per element made the kernel latency-bound on an H200.

// quad i of the tile (row i / QK, k 4 * (i % QK) ..) as 4 consecutive x values, zero outside x
fn load_x(i: u32, row0: u32, k0: u32) -> vec4<f32> {
    let r = row0 + i / QK;
    let e = vec4<u32>(k0 + 4u * (i % QK)) + vec4<u32>(0u, 1u, 2u, 3u);
    let b = p.x + min(r, p.m - 1u) * p.k;
    let last = p.k - 1u;
    let v = vec4<f32>(bitcast<f32>(buf[b + min(e.x, last)]), bitcast<f32>(buf[b + min(e.y, last)]),
                      bitcast<f32>(buf[b + min(e.z, last)]), bitcast<f32>(buf[b + min(e.w, last)]));
    return select(vec4<f32>(0.0), v, (e < vec4<u32>(p.k)) & vec4<bool>(r < p.m));
}

// chunk i of the W tile (weight row i / QK, k 4 * (i % QK) ..) dequantised, zero outside W
fn load_w(i: u32, col0: u32, k0: u32) -> vec4<f32> {
    let c = col0 + i / QK;
    let e = k0 + 4u * (i % QK);
    let v = dq4(p.w + min(c, p.n - 1u) * p.row_bytes, min(e, (p.k - 1u) & ~3u));
    return select(vec4<f32>(0.0), v, c < p.n && e < p.k);
}

// quad i's 4 values into buffer `slot` of the k-major x tile (put_w: chunk i into the W tile)
fn put_x(i: u32, slot: u32, v: vec4<f32>) {
    let r = i / QK;
    let base = slot * BK * XV + 4u * (i % QK) * XV + r / 4u;
    xs[base][r % 4u] = v.x;
    xs[base + XV][r % 4u] = v.y;
    xs[base + 2u * XV][r % 4u] = v.z;
    xs[base + 3u * XV][r % 4u] = v.w;
}
fn put_w(i: u32, slot: u32, v: vec4<f32>) {
    let c = i / QK;
    let base = slot * BK * WV + 4u * (i % QK) * WV + c / 4u;
    ws[base][c % 4u] = v.x;
    ws[base + WV][c % 4u] = v.y;
    ws[base + 2u * WV][c % 4u] = v.z;
    ws[base + 3u * WV][c % 4u] = v.w;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let g = t / GROUP;
    let tx = (t % GROUP) % WV;
    let ty = (t % GROUP) / WV;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    // accumulators acc<i>: row ty * TM + i, columns tx * 4 .. (generated: registers, not an array)
{{ACC_DECL}}
    // the staged values xq<l>, wq<l> (generated: the x quads and W chunks each invocation loads per step)
    var k0 = 0u;
{{FETCH}}
    let steps = (p.k + BK - 1u) / BK;
    for (var s = 0u; s < steps; s++) {
        let slot = s & 1u;
{{STORE}}
        workgroupBarrier();
        k0 = min(k0 + BK, (steps - 1u) * BK);  // the last step fetches itself again, unused
{{FETCH}}
        let xb = slot * BK * XV + ty * (TM / 4u);
        let wb = slot * BK * WV + tx;
        for (var kk = g * KG; kk < g * KG + KG; kk++) {
            let b = ws[wb + kk * WV];
{{PRODUCTS}}
        }
    }
    // k-groups 1 .. SK-1 hand their partial tiles to k-group 0, one at a time, through xs
    // ([BM rows][BN / 4] vec4s fit: the lowerer keeps BN <= 2 BK when SK > 1)
    let slot_of = ty * TM * WV + tx;
    for (var h = 1u; h < SK; h++) {
        workgroupBarrier();
        if (g == h) {
{{HAND}}
        }
        workgroupBarrier();
        if (g == 0u) {
{{TAKE}}
        }
    }
    if (g == 0u) {
        let c = col0 + tx * 4u;
{{STORES}}
    }
}

// row r of the output gets columns c .. c + 3 of v (those inside n)
fn store_row(r: u32, c: u32, v: vec4<f32>) {
    if (r >= p.m) {
        return;
    }
    let b = p.y + r * p.n;
    for (var j = 0u; j < 4u; j++) {
        if (c + j < p.n) {
            buf[b + c + j] = bitcast<u32>(v[j]);
        }
    }
}

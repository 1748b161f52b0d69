// y[r, j] = sum_i x[r, i] * dequant(W)[j, i] for many x rows (prefill): W = GGML blocks read in place.
// 16x16 threads own a 64x64 output tile (rows ty + 16a, cols tx + 16b); per K step of 16 each thread dequantises 4 weights into workgroup memory.
// Bindings: 0 = arena window (u32 words; x, y word offsets, w a BYTE offset), 1 = QuantGgufTiledParams.
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: QuantGgufTiledParams;

{{DECODE}}

var<workgroup> tile_x: array<f32, 1024>;  // [64 rows][16 k]
var<workgroup> tile_w: array<f32, 1024>;  // [16 k][64 weight rows]

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
    let flat = ty * 16u + tx;
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    let w_col = flat >> 2u;  // weight row (output column) this thread dequantises
    let w_part = (flat & 3u) << 2u;  // its 4 elements within the K step
    var acc: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 = k0 + 16u) {
        for (var l = 0u; l < 4u; l = l + 1u) {
            let idx = flat + l * 256u;
            let xr = row0 + (idx >> 4u);
            let xc = k0 + (idx & 15u);
            var xv = 0.0;
            if (xr < p.m && xc < p.k) {
                xv = bitcast<f32>(buf[p.x + xr * p.k + xc]);
            }
            tile_x[idx] = xv;
        }
        var wv = vec4<f32>(0.0);
        let e = k0 + w_part;
        if (col0 + w_col < p.n && e < p.k) {
            wv = dq4(p.w + (col0 + w_col) * p.row_bytes, e);
        }
        for (var i = 0u; i < 4u; i = i + 1u) {
            tile_w[(w_part + i) * 64u + w_col] = wv[i];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            var wk: array<f32, 4>;
            for (var b = 0u; b < 4u; b = b + 1u) {
                wk[b] = tile_w[kk * 64u + tx + 16u * b];
            }
            for (var a = 0u; a < 4u; a = a + 1u) {
                let xa = tile_x[(ty + 16u * a) * 16u + kk];
                for (var b = 0u; b < 4u; b = b + 1u) {
                    acc[a][b] = acc[a][b] + xa * wk[b];
                }
            }
        }
        workgroupBarrier();
    }
    for (var a = 0u; a < 4u; a = a + 1u) {
        let r = row0 + ty + 16u * a;
        for (var b = 0u; b < 4u; b = b + 1u) {
            let j = col0 + tx + 16u * b;
            if (r < p.m && j < p.n) {
                buf[p.y + r * p.n + j] = bitcast<u32>(acc[a][b]);
            }
        }
    }
}

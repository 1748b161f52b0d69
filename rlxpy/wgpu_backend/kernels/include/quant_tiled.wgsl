// The tiled dequantising GEMM of quant_generic_tiled: 16x16 invocations own a 64x64
// output tile (rows ty + 16a, cols tx + 16b). Per K step of 16 every invocation stages 4 values of the
// x tile, and the kernel's stage_w(flat, k0, col0) dequantises its 4 weights of the w tile into
// workgroup memory. Needs the params m, n, k, x, y.
var<workgroup> tile_x: array<f32, 1024>;  // [64 rows][16 k]
var<workgroup> tile_w: array<f32, 1024>;  // [16 k][64 cols]

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
    let flat = ty * 16u + tx;
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
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
        stage_w(flat, k0, col0);
        workgroupBarrier();
        for (var t = 0u; t < 16u; t = t + 1u) {
            var wk: array<f32, 4>;
            for (var b = 0u; b < 4u; b = b + 1u) {
                wk[b] = tile_w[t * 64u + tx + 16u * b];
            }
            for (var a = 0u; a < 4u; a = a + 1u) {
                let xa = tile_x[(ty + 16u * a) * 16u + t];
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
            let c = col0 + tx + 16u * b;
            if (r < p.m && c < p.n) {
                buf[p.y + r * p.n + c] = bitcast<u32>(acc[a][b]);
            }
        }
    }
}

// y[r, c] = sum_kk x[r, kk] * dequant(W)[kk, c] for many x rows; W [K, N] row-major, packed per scheme.
// 16x16 threads own a 64x64 output tile (rows ty + 16a, cols tx + 16b); per K step of 16 each thread dequantises 4 adjacent columns of one W row into workgroup memory.
// Bindings: 0 = arena window (u32 words; x, y, zp word offsets, w and nvfp4 scale BYTE offsets), 1 = QuantGenericTiledParams.
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: QuantGenericTiledParams;

{{DECODE}}

var<workgroup> tile_x: array<f32, 1024>;  // [64 rows][16 k]
var<workgroup> tile_w: array<f32, 1024>;  // [16 k][64 cols]

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
    let flat = ty * 16u + tx;
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    let w_row = flat >> 4u;  // K row of the tile this thread dequantises
    let w_col = (flat & 15u) << 2u;  // its first of 4 columns
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
        let kk = k0 + w_row;
        let col = col0 + w_col;
        var wv = vec4<f32>(0.0);
        if (kk < p.k && col < p.n) {
            let aff = affine4(kk / p.block, col);  // one division per K step, not per element
            wv = (codes4(kk * p.n + col) - aff.zero) * aff.scale;
        }
        for (var i = 0u; i < 4u; i = i + 1u) {
            tile_w[w_row * 64u + w_col + i] = wv[i];
        }
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

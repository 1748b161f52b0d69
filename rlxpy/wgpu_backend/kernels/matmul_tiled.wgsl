// y[b] = act(a[b] @ w[b] + bias): f32 GEMM, 64x64 output tile per workgroup, K in steps of 16.
// Thread (tx, ty) of 16x16 owns rows ty + 16i and cols tx + 16j (i, j < 4); grid z = batch.
// Bindings: 0 = arena window (u32 words), 1 = MatmulTiledParams (element offsets, batch strides).
struct MatmulTiledParams {
    m: u32,
    n: u32,
    k: u32,
    a: u32,
    w: u32,
    y: u32,
    bias: u32,
    has_bias: u32,
    stride_a: u32,
    stride_w: u32,
    stride_y: u32,
    split1: u32,
    split2: u32,
    block_rows: u32,
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: MatmulTiledParams;

{{PRELUDE}}

var<workgroup> tile_a: array<f32, 1024>;  // [64 rows][16 k]
var<workgroup> tile_w: array<f32, 1024>;  // [16 k][64 cols]

// Where column `col` of row `row` goes. Plain: y[row, col]. Split (SplitMatMul): columns
// [0, split1), [split1, split2), [split2, n) are three blocks stored one after another, each
// [block_rows, width] row-major (block_rows = the full m: an active extent that cuts m must not
// move the blocks); a plain GEMM has split1 = split2 = n.
fn y_index(row: u32, col: u32) -> u32 {
    if (col < p.split1) {
        return row * p.split1 + col;
    }
    if (col < p.split2) {
        return p.block_rows * p.split1 + row * (p.split2 - p.split1) + col - p.split1;
    }
    return p.block_rows * p.split2 + row * (p.n - p.split2) + col - p.split2;
}

fn epilogue(v: f32) -> f32 {
    return {{EXPR}};
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
    let flat = ty * 16u + tx;
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    let a_base = p.a + wid.z * p.stride_a;
    let w_base = p.w + wid.z * p.stride_w;
    var acc: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 = k0 + 16u) {
        for (var l = 0u; l < 4u; l = l + 1u) {
            let idx = flat + l * 256u;
            let ar = idx / 16u;
            let ac = idx % 16u;
            var av = 0.0;
            if (row0 + ar < p.m && k0 + ac < p.k) {
                av = ld_f32(a_base + (row0 + ar) * p.k + k0 + ac);
            }
            tile_a[idx] = av;
            let wr = idx / 64u;
            let wc = idx % 64u;
            var wv = 0.0;
            if (k0 + wr < p.k && col0 + wc < p.n) {
                wv = ld_f32(w_base + (k0 + wr) * p.n + col0 + wc);
            }
            tile_w[idx] = wv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            var wv: array<f32, 4>;
            for (var j = 0u; j < 4u; j = j + 1u) {
                wv[j] = tile_w[kk * 64u + tx + 16u * j];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                let av = tile_a[(ty + 16u * i) * 16u + kk];
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i][j] = acc[i][j] + av * wv[j];
                }
            }
        }
        workgroupBarrier();
    }
    let y_base = p.y + wid.z * p.stride_y;
    for (var i = 0u; i < 4u; i = i + 1u) {
        let row = row0 + ty + 16u * i;
        for (var j = 0u; j < 4u; j = j + 1u) {
            let col = col0 + tx + 16u * j;
            if (row < p.m && col < p.n) {
                var v = acc[i][j];
                if (p.has_bias == 1u) {
                    v = v + ld_f32(p.bias + col);
                }
                st_f32(y_base + y_index(row, col), epilogue(v));
            }
        }
    }
}

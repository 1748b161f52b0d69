// matmul_tiled's arena access where every offset, row length and split is a multiple of 4 elements:
// the arena is bound as vec4 words, so each load and store moves 16 bytes.
// load_a: a[row, k .. k+3] (rows k long), load_w: w[k, col .. col+3], load_bias: bias[col .. col+3],
// zero outside the matrix and past k_len (the K split's chunk); store_y: y[row, col .. col+3] (the 4
// columns share a split block).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<vec4<u32>>;
@group(0) @binding(1) var<uniform> p: {{PARAMS}};

fn aw(i: u32) -> u32 {  // arena word i (the GGUF decoders' read)
    return buf[i >> 2u][i & 3u];
}
fn ld4(i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(buf[i >> 2u]);
}
// Branch-free: a load outside reads word 0 of the window instead and is replaced by zeros (no branch
// in the GEMM's K loop, see lowering/matmul_core.py).
fn load_a(base: u32, row: u32, k: u32) -> vec4<f32> {
    let inside = row < p.m && k < p.k_len;  // k is a multiple of 4 and so is p.k_len: all four or none
    return select(vec4<f32>(), ld4(select(0u, base + row * p.k + k, inside)), inside);
}
fn load_w(base: u32, k: u32, col: u32) -> vec4<f32> {
    let inside = k < p.k_len && col < p.n;
    return select(vec4<f32>(), ld4(select(0u, base + k * p.n + col, inside)), inside);
}
fn load_bias(col: u32) -> vec4<f32> {
    return ld4(p.bias + col);
}
fn store_y(base: u32, row: u32, col: u32, v: vec4<f32>) {
    buf[(base + y_index(row, col)) >> 2u] = bitcast<vec4<u32>>(v);  // the 4 columns share a split block
}

// matmul_tiled's transposed operands where every offset and row length is a multiple of 4 elements (with
// matmul_access_vec4): load_a_t: a[row .. row+3, k] of an a stored [K, M] (its rows m long), load_w_t:
// w[k .. k+3, col] of a w stored [N, K] (rows k long); zero outside the matrix and past k_len (the K
// split's chunk; m, k_len and the split's offsets are multiples of 4: all four or none).
fn load_a_t(base: u32, row: u32, k: u32) -> vec4<f32> {
    if (row < p.m && k < p.k_len) {
        return ld4(base + k * p.m + row);
    }
    return vec4<f32>();
}
fn load_w_t(base: u32, k: u32, col: u32) -> vec4<f32> {
    if (col < p.n && k < p.k_len) {
        return ld4(base + col * p.k + k);
    }
    return vec4<f32>();
}

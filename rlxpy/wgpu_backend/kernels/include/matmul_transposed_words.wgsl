// matmul_tiled's transposed operands for views that may start anywhere (with matmul_access_words, word by
// word with per-element bounds): load_a_t: a[row .. row+3, k] of an a stored [K, M] (its rows m long),
// load_w_t: w[k .. k+3, col] of a w stored [N, K] (rows k long); zero outside the matrix and past k_len.
fn load_a_t(base: u32, row: u32, k: u32) -> vec4<f32> {
    if (k < p.k_len && row < p.m) {
        return ld4(base + k * p.m + row, p.m - row);
    }
    return vec4<f32>();
}
fn load_w_t(base: u32, k: u32, col: u32) -> vec4<f32> {
    if (col < p.n && k < p.k_len) {
        return ld4(base + col * p.k + k, p.k_len - k);
    }
    return vec4<f32>();
}

// matmul_tiled's transposed operands for views that may start anywhere (with matmul_access_words, word by
// word with per-element bounds): load_a_t: a[row .. row+3, k] of an a stored [K, M] (its rows m long),
// load_w_t: w[k .. k+3, col] of a w stored [N, K] (rows k long); zero outside the matrix and past k_len.
fn load_a_t(base: u32, row: u32, k: u32) -> vec4<f32> {  // branch-free, as load_a
    let inside = k < p.k_len && row < p.m;
    return select(vec4<f32>(), ld4(select(0u, base + k * p.m + row, inside), select(1u, p.m - row, inside)),
                  inside);
}
fn load_w_t(base: u32, k: u32, col: u32) -> vec4<f32> {
    let inside = col < p.n && k < p.k_len;
    return select(vec4<f32>(), ld4(select(0u, base + col * p.k + k, inside), select(1u, p.k_len - k, inside)),
                  inside);
}

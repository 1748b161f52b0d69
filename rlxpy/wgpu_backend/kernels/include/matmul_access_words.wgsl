// matmul_tiled's arena access for views that may start anywhere: words one by one, with per-element
// bounds. load_a: a[row, k .. k+3] (rows k long), load_w: w[k, col .. col+3], load_bias: bias[col ..
// col+3], zero outside the matrix and past k_len (the K split's chunk); store_y: y[row, col .. col+3]
// for the columns inside it.
#include "common_arena.wgsl"
#include "common_words.wgsl"

// The first min(count, 4) elements at i, zeros after (count >= 1). Branch-free, as the vec4 access: the
// indices are clamped to the last element, the values past it dropped (a load under a branch is not
// hoisted, see lowering/matmul_core.py).
fn ld4(i: u32, count: u32) -> vec4<f32> {
    let lanes = vec4<u32>(0u, 1u, 2u, 3u);
    let e = vec4<u32>(i) + min(lanes, vec4<u32>(count - 1u));
    let v = vec4<f32>(ld_f32(e.x), ld_f32(e.y), ld_f32(e.z), ld_f32(e.w));
    return select(vec4<f32>(), v, lanes < vec4<u32>(count));
}
// Outside the matrix: word 0 of the window is read instead and replaced by zeros.
fn load_a(base: u32, row: u32, k: u32) -> vec4<f32> {
    let inside = row < p.m && k < p.k_len;
    return select(vec4<f32>(), ld4(select(0u, base + row * p.k + k, inside), select(1u, p.k_len - k, inside)),
                  inside);
}
fn load_w(base: u32, k: u32, col: u32) -> vec4<f32> {
    let inside = k < p.k_len && col < p.n;
    return select(vec4<f32>(), ld4(select(0u, base + k * p.n + col, inside), select(1u, p.n - col, inside)),
                  inside);
}
fn load_bias(col: u32) -> vec4<f32> {
    return ld4(p.bias + col, p.n - col);
}
fn store_y(base: u32, row: u32, col: u32, v: vec4<f32>) {
    st_f32(base + y_index(row, col), v.x);
    if (col + 1u < p.n) {
        st_f32(base + y_index(row, col + 1u), v.y);
    }
    if (col + 2u < p.n) {
        st_f32(base + y_index(row, col + 2u), v.z);
    }
    if (col + 3u < p.n) {
        st_f32(base + y_index(row, col + 3u), v.w);
    }
}

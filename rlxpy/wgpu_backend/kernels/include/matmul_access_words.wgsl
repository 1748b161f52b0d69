// matmul_tiled's arena access for views that may start anywhere: words one by one, with per-element
// bounds. load_a: a[row, k .. k+3] (rows k long), load_w: w[k, col .. col+3], load_bias: bias[col ..
// col+3], zero outside the matrix and past k_len (the K split's chunk); store_y: y[row, col .. col+3]
// for the columns inside it.
#include "common_arena.wgsl"
#include "common_words.wgsl"

fn ld4(i: u32, count: u32) -> vec4<f32> {  // the first min(count, 4) elements, zeros after
    var v = vec4<f32>();
    v.x = ld_f32(i);
    if (count > 1u) {
        v.y = ld_f32(i + 1u);
    }
    if (count > 2u) {
        v.z = ld_f32(i + 2u);
    }
    if (count > 3u) {
        v.w = ld_f32(i + 3u);
    }
    return v;
}
fn load_a(base: u32, row: u32, k: u32) -> vec4<f32> {
    if (row < p.m && k < p.k_len) {
        return ld4(base + row * p.k + k, p.k_len - k);
    }
    return vec4<f32>();
}
fn load_w(base: u32, k: u32, col: u32) -> vec4<f32> {
    if (k < p.k_len && col < p.n) {
        return ld4(base + k * p.n + col, p.n - col);
    }
    return vec4<f32>();
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

// Winograd F(2x2, 3x3), weight transform: U[t][co][ci] = (G g G^T)[t / 4][t % 4] for the 3x3 kernel
// g = w[co, ci], G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]] (the halves are exact in
// f32). One invocation per (co, ci); U's 16 matrices [c_out, c_in] are the GEMM's a operands.
// Bindings: 0 = arena window (u32 words), 1 = ConvWinogradParams (element offsets).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

// G applied to three values: (a, (a + b + c) / 2, (a - b + c) / 2, c)
fn g_col(a: f32, b: f32, c: f32) -> vec4<f32> {
    return vec4<f32>(a, 0.5 * (a + b + c), 0.5 * (a - b + c), c);
}

// Row r of G g G^T (the 3 values of row r of G g, G applied along it) to points 4r .. 4r+3.
fn store_row(i: u32, plane: u32, r: u32, a: f32, b: f32, c: f32) {
    let u = g_col(a, b, c);
    let first = p.u + 4u * r * plane + i;
    st_f32(first, u.x);
    st_f32(first + plane, u.y);
    st_f32(first + 2u * plane, u.z);
    st_f32(first + 3u * plane, u.w);
}

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let src = p.w + i * 9u;  // w[co, ci] is 9 consecutive words: i = co * c_in + ci
    // the columns of G g (G applied to each column of g)
    let c0 = g_col(ld_f32(src), ld_f32(src + 3u), ld_f32(src + 6u));
    let c1 = g_col(ld_f32(src + 1u), ld_f32(src + 4u), ld_f32(src + 7u));
    let c2 = g_col(ld_f32(src + 2u), ld_f32(src + 5u), ld_f32(src + 8u));
    let plane = p.c_out * p.c_in;
    store_row(i, plane, 0u, c0.x, c1.x, c2.x);
    store_row(i, plane, 1u, c0.y, c1.y, c2.y);
    store_row(i, plane, 2u, c0.z, c1.z, c2.z);
    store_row(i, plane, 3u, c0.w, c1.w, c2.w);
}

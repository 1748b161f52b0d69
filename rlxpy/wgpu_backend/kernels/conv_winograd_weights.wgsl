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

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let src = p.w + i * 9u;  // w[co, ci] is 9 consecutive words: i = co * c_in + ci
    var k: array<f32, 9>;
    for (var j = 0u; j < 9u; j = j + 1u) {
        k[j] = ld_f32(src + j);
    }
    // rows of G g (4 rows of 3), then G applied along each row
    let c0 = g_col(k[0], k[3], k[6]);
    let c1 = g_col(k[1], k[4], k[7]);
    let c2 = g_col(k[2], k[5], k[8]);
    let plane = p.c_out * p.c_in;
    for (var r = 0u; r < 4u; r = r + 1u) {
        let u = g_col(c0[r], c1[r], c2[r]);
        for (var c = 0u; c < 4u; c = c + 1u) {
            st_f32(p.u + (r * 4u + c) * plane + i, u[c]);
        }
    }
}

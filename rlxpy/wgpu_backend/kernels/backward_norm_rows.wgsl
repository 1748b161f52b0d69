// dx of LayerNorm [center=1] or RmsNorm [center=0] over the last axis, per row of x and dy:
//   LayerNorm: xhat = (x - mean) * inv, s = dy * gamma, dx = inv * (s - mean(s) - xhat * mean(s * xhat)),
//              inv = 1 / sqrt(var + eps) with the centred two-pass (biased) variance;
//   RmsNorm:   r = 1 / sqrt(mean(x^2) + eps), dx = r * (gamma * dy - x * r^2 * mean(dy * gamma * x)).
// One workgroup of {{WG}} lanes per row. Bindings: 0 = arena window (u32 words), 1 = BackwardNormRowsParams.
#include "common_arena.wgsl"
#include "backward_norm_row.wgsl"

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let count = f32(p.cols);
    let mean = row_mean(lane, base);
    // sum of squares (centred for LayerNorm), and the row's dot products with s = dy * gamma:
    // sum(s) and sum(s * (x - mean)); inv scales the second into sum(s * xhat) afterwards
    var squares = 0.0;
    var dots = vec2<f32>(0.0);
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let centred = ld_f32(p.x + base + c) - mean;
        let s = ld_f32(p.dy + base + c) * ld_f32(p.gamma + c);
        squares = squares + centred * centred;
        dots = dots + vec2<f32>(s, s * centred);
    }
    let sq = workgroup_sum(lane, squares);
    let sums = workgroup_sum2(lane, dots);
    let inv = 1.0 / sqrt(sq / count + p.eps);
    let mean_s = select(0.0, sums.x / count, p.center == 1u);
    // LayerNorm: mean(s * xhat) = inv * sum(s * centred) / n; RmsNorm: r^2 * mean(s * x), same form
    let k = inv * inv * sums.y / count;
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let centred = ld_f32(p.x + base + c) - mean;
        let s = ld_f32(p.dy + base + c) * ld_f32(p.gamma + c);
        st_f32(p.dx + base + c, inv * (s - mean_s - centred * k));
    }
}

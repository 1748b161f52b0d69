// dx of LayerNorm [center=1] or RmsNorm [center=0] over the last axis, per row of x and dy:
//   LayerNorm: xhat = (x - mean) * inv, s = dy * gamma, dx = inv * (s - mean(s) - xhat * mean(s * xhat)),
//              inv = 1 / sqrt(var + eps) with the centred two-pass (biased) variance;
//   RmsNorm:   r = 1 / sqrt(mean(x^2) + eps), dx = r * (gamma * dy - x * r^2 * mean(dy * gamma * x)).
// One workgroup of {{WG}} lanes per row. Bindings: 0 = arena window (u32 words), 1 = BackwardNormRowsParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

var<workgroup> partial: array<vec2<f32>, {{WG}}>;

fn tree_merge(tree: u32, a: u32, b: u32) {
    partial[a] = partial[a] + partial[b];
}

// both lanes' sums over the workgroup
fn workgroup_sum2(lane: u32, value: vec2<f32>) -> vec2<f32> {
    partial[lane] = value;
    tree_reduce(lane, 0u);
    let total = partial[0];
    workgroupBarrier();  // every lane has read the total before partial is reused
    return total;
}

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    let count = f32(p.cols);
    var mean = 0.0;
    if (p.center == 1u) {
        var part = 0.0;
        for (var c = lane; c < p.cols; c = c + {{WG}}u) {
            part = part + ld_f32(p.x + base + c);
        }
        mean = workgroup_sum2(lane, vec2<f32>(part, 0.0)).x / count;
    }
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
    let sq = workgroup_sum2(lane, vec2<f32>(squares, 0.0)).x;
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

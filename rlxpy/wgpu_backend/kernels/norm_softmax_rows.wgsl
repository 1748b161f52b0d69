// y[row, c] = exp(x[row, c] - m) / sum_j exp(x[row, j] - m), m = max_j x[row, j]: softmax of contiguous rows.
// One workgroup of {{WG}} lanes per row: pass 1 online (max, sum) per lane + tree merge, pass 2 writes.
// Bindings: 0 = arena window (u32 words), 1 = NormSoftmaxRowsParams (element offsets in the window).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: NormSoftmaxRowsParams;

{{PRELUDE}}

var<workgroup> part_max: array<f32, {{WG}}>;
var<workgroup> part_sum: array<f32, {{WG}}>;

// exp(a - m), with -inf inputs contributing exactly 0 (so an all -inf lane is (m = -inf, s = 0), not NaN).
fn exp_shift(a: f32, m: f32) -> f32 {
    return select(exp(a - m), 0.0, a == -inf_f32());
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.rows) {
        return;
    }
    let lane = lid.x;
    let base = row * p.cols;
    var m: f32 = -inf_f32();
    var s: f32 = 0.0;
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        let v = ld_f32(p.x + base + c);
        let m_new = maxp(m, v);
        s = s * exp_shift(m, m_new) + exp_shift(v, m_new);
        m = m_new;
    }
    part_max[lane] = m;
    part_sum[lane] = s;
    workgroupBarrier();
    for (var stride = {{WG}}u / 2u; stride > 0u; stride = stride / 2u) {
        if (lane < stride) {
            let m1 = part_max[lane];
            let m2 = part_max[lane + stride];
            let merged = maxp(m1, m2);
            part_sum[lane] = part_sum[lane] * exp_shift(m1, merged)
                + part_sum[lane + stride] * exp_shift(m2, merged);
            part_max[lane] = merged;
        }
        workgroupBarrier();
    }
    let row_max = part_max[0];
    let row_sum = part_sum[0];
    // a NaN max (NaN in the row) or an all -inf row gives NaN everywhere, like torch.softmax
    for (var c = lane; c < p.cols; c = c + {{WG}}u) {
        st_f32(p.y + base + c, exp_shift(ld_f32(p.x + base + c), row_max) / row_sum);
    }
}

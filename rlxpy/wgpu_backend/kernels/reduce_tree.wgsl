// y[row] = reduce_r x[row, r] (sum/mean/max/min/prod) over contiguous rows longer than 64 (inner == 1).
// One workgroup of {{WG}} lanes per row: lane l folds r = l, l + {{WG}}, ...; then a workgroup-memory tree.
// Bindings: 0 = arena window, 1 = ReduceTreeParams (r in [start, start + count); accumulate folds in y).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ReduceTreeParams;

{{PRELUDE}}

var<workgroup> partial: array<f32, {{WG}}>;

fn combine(a: f32, b: f32) -> f32 {
    return {{COMBINE}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.rows) {
        return;
    }
    let base = p.x + row * p.reduce_dim + p.start;
    var acc: f32 = {{IDENTITY}};
    for (var r = lid.x; r < p.count; r = r + {{WG}}u) {
        acc = combine(acc, ld_f32(base + r));
    }
    partial[lid.x] = acc;
    workgroupBarrier();
    for (var stride = {{WG}}u / 2u; stride > 0u; stride = stride / 2u) {
        if (lid.x < stride) {
            partial[lid.x] = combine(partial[lid.x], partial[lid.x + stride]);
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        // a long row is split over several dispatches: later chunks fold into the partial result in y;
        // the divisor (n for mean, else 1) is applied by the last chunk only
        var total = partial[0];
        if (p.accumulate == 1u) {
            total = combine(ld_f32(p.y + row), total);
        }
        st_f32(p.y + row, total / p.divisor);
    }
}

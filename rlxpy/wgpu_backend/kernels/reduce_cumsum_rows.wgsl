// y[row, c] = sum_{j <= c} x[row, j] (inclusive) or sum_{j < c} (exclusive): cumsum of long contiguous rows.
// One workgroup of {{WG}} lanes per row, chunks of {{WG}} elements: Hillis-Steele scan + running carry.
// Bindings: 0 = arena window, 1 = ReduceCumsumRowsParams (c in [start, start + count): y[start - 1] is the carry).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ReduceCumsumRowsParams;

{{PRELUDE}}

var<workgroup> scan: array<f32, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.rows) {
        return;
    }
    let lane = lid.x;
    let base = row * p.cols;
    var carry: f32 = 0.0;
    if (p.start > 0u) {  // a later chunk of a long row: continue from what the previous dispatch wrote
        carry = ld_f32(p.y + base + p.start - 1u);
        if (p.exclusive == 1u) {
            carry = carry + ld_f32(p.x + base + p.start - 1u);
        }
    }
    let end = p.start + p.count;
    for (var first = p.start; first < end; first = first + {{WG}}u) {
        let c = first + lane;
        var v: f32 = 0.0;
        if (c < end) {
            v = ld_f32(p.x + base + c);
        }
        scan[lane] = v;
        workgroupBarrier();
        for (var offset = 1u; offset < {{WG}}u; offset = offset * 2u) {
            var t = scan[lane];
            if (lane >= offset) {
                t = t + scan[lane - offset];
            }
            workgroupBarrier();
            scan[lane] = t;
            workgroupBarrier();
        }
        // exclusive reads the previous lane's inclusive sum (not inclusive - v: inf - inf would be NaN)
        var before: f32 = 0.0;
        if (lane > 0u) {
            before = scan[lane - 1u];
        }
        let within = select(scan[lane], before, p.exclusive == 1u);
        if (c < end) {
            st_f32(p.y + base + c, carry + within);
        }
        carry = carry + scan[{{WG}}u - 1u];
        workgroupBarrier();
    }
}

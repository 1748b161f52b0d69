// y[row, c] = sum_{j <= c} x[row, j] (inclusive) or sum_{j < c} (exclusive): cumsum of long contiguous rows.
// One workgroup of {{WG}} lanes per row, chunks of {{WG}} elements: Hillis-Steele scan + running carry.
// Bindings: 0 = arena window (u32 words), 1 = ScanRowsParams (element offsets; exclusive = 0/1).
struct ScanRowsParams {
    rows: u32,
    cols: u32,
    x: u32,
    y: u32,
    exclusive: u32,
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ScanRowsParams;

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
    for (var start = 0u; start < p.cols; start = start + {{WG}}u) {
        let c = start + lane;
        var v: f32 = 0.0;
        if (c < p.cols) {
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
        if (c < p.cols) {
            st_f32(p.y + base + c, carry + within);
        }
        carry = carry + scan[{{WG}}u - 1u];
        workgroupBarrier();
    }
}

// y[row, c] = sum_{j <= c} x[row, j] (inclusive) or sum_{j < c} (exclusive): cumsum of long contiguous rows.
// One workgroup of {{WG}} lanes per row, chunks of {{WG}} elements: Hillis-Steele scan + running carry.
// Bindings: 0 = arena window, 1 = ReduceCumsumRowsParams (c in [start, start + count): y[start - 1] is the carry).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_scan.wgsl"

var<workgroup> scan: array<f32, {{WG}}>;

fn run_row(row: u32, lane: u32) {
    if (row >= p.rows) {
        return;
    }
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
        scan_inclusive(lane);
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

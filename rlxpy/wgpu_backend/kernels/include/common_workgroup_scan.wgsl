// An inclusive Hillis-Steele scan over the {{WG}} lanes of a workgroup (matmul_grouped_route,
// reduce_cumsum_rows): once every lane wrote its value to the kernel's workgroup array `scan` (of any
// type with +), scan_inclusive leaves scan[l] = scan[0] + ... + scan[l], added in the same order on
// every backend. Call from uniform control flow.
fn scan_inclusive(lane: u32) {
    workgroupBarrier();
    for (var offset = 1u; offset < {{WG}}u; offset = offset * 2u) {
        var v = scan[lane];
        if (lane >= offset) {
            v = v + scan[lane - offset];
        }
        workgroupBarrier();
        scan[lane] = v;
        workgroupBarrier();
    }
}

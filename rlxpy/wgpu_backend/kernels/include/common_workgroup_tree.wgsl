// A tree reduction over the {{WG}} lanes (a power of two) of a workgroup that keeps one slot per lane in
// workgroup arrays: the kernel's tree_merge(tree, a, b) folds slot b into slot a, for b = a + WG/2,
// then a + WG/4, ..., a + 1, so slot 0 ends with every lane's slot merged. ``tree`` tells a kernel with
// several reductions which one runs. Call from uniform control flow once every lane wrote its slot.
fn tree_reduce(lane: u32, tree: u32) {
    workgroupBarrier();
    for (var stride = {{WG}}u / 2u; stride > 0u; stride = stride / 2u) {
        if (lane < stride) {
            tree_merge(tree, lane, lane + stride);
        }
        workgroupBarrier();
    }
}

// The order of TopK, Argmax, their rank kernel and sampling's argmax (reduce_topk, reduce_rank,
// sample_rows): a strict total order of (value, index) pairs: NaN first, then the larger value, then
// the smaller index (torch.topk's and numpy.argmax's order, ties broken toward the first index).
#include "common_float.wgsl"

fn ranks_before(v1: f32, i1: u32, v2: f32, i2: u32) -> bool {
    let nan1 = is_nan(v1);
    let nan2 = is_nan(v2);
    if (nan1 != nan2) {
        return nan1;
    }
    if (!nan1 && v1 != v2) {
        return v1 > v2;
    }
    return i1 < i2;
}

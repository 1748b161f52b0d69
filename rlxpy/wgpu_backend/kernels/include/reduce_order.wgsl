// The order of TopK, Argmax, their rank kernel and sampling's argmax (reduce_topk, reduce_rank,
// sample_rows): a strict total order of (value, index) pairs: NaN first, then the larger value, then
// the smaller index (torch.topk's and numpy.argmax's order, ties broken toward the first index).
#include "common_float.wgsl"

// An order-preserving u32 key of a non-NaN float (a larger float, a larger key), -0 folded onto +0.
// Built from the bits alone: a GPU that flushes subnormals in float compares (NVIDIA's FTZ) would
// call 1e-45 equal to 0, where torch.argmax and numpy rank it above.
fn order_key(v: f32) -> u32 {
    let raw = bitcast<u32>(v);
    let bits = select(raw, 0u, raw == 0x80000000u);
    return select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
}

fn ranks_before(v1: f32, i1: u32, v2: f32, i2: u32) -> bool {
    let nan1 = is_nan(v1);
    let nan2 = is_nan(v2);
    if (nan1 != nan2) {
        return nan1;
    }
    let k1 = order_key(v1);
    let k2 = order_key(v2);
    if (!nan1 && k1 != k2) {
        return k1 > k2;
    }
    return i1 < i2;
}

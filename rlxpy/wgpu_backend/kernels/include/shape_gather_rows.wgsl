// The table row picked by index k of Gather (shape_gather, backward_gather): idx[k] read as the index
// dtype {{INDEX}} at word offset p.idx, truncated, then clamped into [0, p.dim - 1] (NaN -> 0).
fn row_i32(k: u32) -> u32 {
    let v = bitcast<i32>(buf[p.idx + k]);
    return select(min(u32(v), p.dim - 1u), 0u, v < 0);
}
fn row_u32(k: u32) -> u32 {
    return min(buf[p.idx + k], p.dim - 1u);
}
fn row_f32(k: u32) -> u32 {
    let v = bitcast<f32>(buf[p.idx + k]);
    return select(min(u32(v), p.dim - 1u), 0u, !(v >= 1.0));
}
// little-endian i64: a negative high word clamps to 0, any other non-zero high word to dim - 1
fn row_i64(k: u32) -> u32 {
    let low = buf[p.idx + 2u * k];
    let high = buf[p.idx + 2u * k + 1u];
    if ((high & 0x80000000u) != 0u) {
        return 0u;
    }
    return select(min(low, p.dim - 1u), p.dim - 1u, high != 0u);
}
fn row_of(k: u32) -> u32 {
    return row_{{INDEX}}(k);
}

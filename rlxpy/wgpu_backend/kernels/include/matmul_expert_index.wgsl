// Expert of row i of a grouped matmul, read as the index dtype {{INDEX}}: trunc(idx[i]) when it is in
// [0, experts), else `experts` (the bucket of rows whose output is zero). f32: NaN and +-inf are out
// of range; i64: little-endian words, any non-zero high word is out of range.
fn expert_i32(i: u32) -> u32 {
    let v = bitcast<i32>(buf[p.idx + i]);
    return select(p.experts, u32(v), v >= 0 && u32(v) < p.experts);
}
fn expert_u32(i: u32) -> u32 {
    return min(buf[p.idx + i], p.experts);
}
fn expert_f32(i: u32) -> u32 {
    let v = bitcast<f32>(buf[p.idx + i]);
    return select(p.experts, u32(max(v, 0.0)), v > -1.0 && v < f32(p.experts));
}
fn expert_i64(i: u32) -> u32 {
    let low = buf[p.idx + 2u * i];
    return select(p.experts, low, buf[p.idx + 2u * i + 1u] == 0u && low < p.experts);
}
fn expert_of(i: u32) -> u32 {
    return expert_{{INDEX}}(i);
}

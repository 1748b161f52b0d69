// The class index of a row of a cross-entropy, read as the targets' dtype {{TARGET}} (i32, u32 or
// little-endian i64 words): p.cols (never a class) when it lies outside [0, p.cols), so callers test
// ``target < p.cols``. Needs the params fields targets and cols.
fn target_i32(row: u32) -> u32 {
    let v = bitcast<i32>(buf[p.targets + row]);
    return select(p.cols, u32(v), v >= 0 && u32(v) < p.cols);
}
fn target_u32(row: u32) -> u32 {
    let v = buf[p.targets + row];
    return select(p.cols, v, v < p.cols);
}
fn target_i64(row: u32) -> u32 {
    let low = buf[p.targets + 2u * row];
    let high = buf[p.targets + 2u * row + 1u];
    return select(p.cols, low, high == 0u && low < p.cols);
}
fn target_of(row: u32) -> u32 {
    return target_{{TARGET}}(row);
}

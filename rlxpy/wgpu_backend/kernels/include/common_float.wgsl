// NaN and infinity by bits (WGSL lets a compiler assume neither exists), NaN-propagating max/min,
// and the saturating float -> int conversions.
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn nan_f32() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn inf_f32() -> f32 { return bitcast<f32>(0x7f800000u); }
// f32 -> int: truncate toward zero, saturate at the int's range, NaN -> 0. Explicit because backends
// differ on out-of-range conversions (GL wraps, Vulkan saturates at the largest f32 below 2^31 / 2^32).
fn sat_i32(v: f32) -> i32 {
    if (is_nan(v)) { return 0; }
    if (v >= 2147483648.0) { return 2147483647; }
    return i32(max(v, -2147483648.0));
}
fn sat_u32(v: f32) -> u32 {
    if (is_nan(v)) { return 0u; }
    if (v >= 4294967296.0) { return 4294967295u; }
    return u32(max(v, 0.0));
}
// max/min that propagate NaN like torch.maximum (WGSL's are implementation-defined on NaN)
fn maxp(a: f32, b: f32) -> f32 { return select(max(a, b), nan_f32(), is_nan(a) || is_nan(b)); }
fn minp(a: f32, b: f32) -> f32 { return select(min(a, b), nan_f32(), is_nan(a) || is_nan(b)); }

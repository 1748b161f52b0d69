// Conv (cross-correlation): tap t of output o along one axis reads input o*s + t*dil - pad (-1: the
// tap lies in the padding); w_index is w[g*C_out/G + o, c, tap] of w [C_out, C_in/G, *kernel], and
// w_channel_stride how far w_index moves from input channel c to c + 1.
fn src_axis(o: u32, t: u32, s: u32, pad: i32, dil: u32, size: u32) -> i32 {
    let i = i32(o * s + t * dil) - pad;
    return select(-1, i, i >= 0 && i < i32(size));
}
fn w_index(g: u32, o: u32, c: u32, tap: u32) -> u32 {
    return ((g * p.c_out_g + o) * p.c_in_g + c) * p.kvol + tap;
}
fn w_channel_stride() -> u32 {
    return p.kvol;
}

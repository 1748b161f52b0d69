// Transposed conv, as a gather: output o receives tap t of input i where i*s + t*dil - pad = o, so
// i = (o + pad - t*dil) / s when that divides exactly and lies in the input (else -1: no input there);
// w_index is w[g*C_in/G + c, o, tap] of w [C_in, C_out/G, *kernel] (torch's layout), and
// w_channel_stride how far w_index moves from input channel c to c + 1.
fn src_axis(o: u32, t: u32, s: u32, pad: i32, dil: u32, size: u32) -> i32 {
    let num = i32(o) + pad - i32(t * dil);
    if (num < 0) {
        return -1;
    }
    let i = num / i32(s);
    return select(-1, i, i * i32(s) == num && i < i32(size));
}
fn w_index(g: u32, o: u32, c: u32, tap: u32) -> u32 {
    return ((g * p.c_in_g + c) * p.c_out_g + o) * p.kvol + tap;
}
fn w_channel_stride() -> u32 {
    return p.c_out_g * p.kvol;
}

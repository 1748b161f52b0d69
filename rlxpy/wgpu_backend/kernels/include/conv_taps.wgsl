// x_at(row, od, oh, ow, td, th, tw): the input element that window tap (td, th, tw) of output position
// (od, oh, ow) reads from input row `row` (= n * C_in + channel), 0.0 where the tap falls in the
// padding (a zero that is still multiplied: 0 * inf = NaN as in torch). Every conv is 3-D here: a
// 1-D/2-D one has size-1 leading dims (kernel 1, stride 1, no padding). conv_window_{{MODE}} maps
// one axis (forward or transposed conv). Needs ConvParams' geometry fields.
#include "conv_window_{{MODE}}.wgsl"

// (od, oh, ow) of output position pos = (od * out_h + oh) * out_w + ow
fn out_position(pos: u32) -> vec3<u32> {
    return vec3<u32>(pos / (p.out_w * p.out_h), (pos / p.out_w) % p.out_h, pos % p.out_w);
}

// tap_offset: where that tap reads inside one input channel (-1 in the padding).
fn tap_offset(od: u32, oh: u32, ow: u32, td: u32, th: u32, tw: u32) -> i32 {
    let id = src_axis(od, td, p.s_d, p.p_d, p.dl_d, p.in_d);
    let ih = src_axis(oh, th, p.s_h, p.p_h, p.dl_h, p.in_h);
    let iw = src_axis(ow, tw, p.s_w, p.p_w, p.dl_w, p.in_w);
    if (id < 0 || ih < 0 || iw < 0) {
        return -1;
    }
    return i32((u32(id) * p.in_h + u32(ih)) * p.in_w + u32(iw));
}
fn x_at(row: u32, od: u32, oh: u32, ow: u32, td: u32, th: u32, tw: u32) -> f32 {
    let offset = tap_offset(od, oh, ow, td, th, tw);
    if (offset < 0) {
        return 0.0;
    }
    return ld_f32(p.x + row * p.in_d * p.in_h * p.in_w + u32(offset));
}

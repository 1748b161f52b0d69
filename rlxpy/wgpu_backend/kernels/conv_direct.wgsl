// y[n, co, pos] = act(bias[co] + sum_{c, tap} x_at(...) * w[...]) for convs with few output channels
// per group (depthwise, channel multipliers, small outputs) where a GEMM tile would idle: one
// invocation per output element, looping over the group's input channels and the window taps.
// MODE: forward or transposed conv (include/conv_window_*). Bindings: 0 = arena window (u32 words),
// 1 = ConvParams (element offsets; 3-D geometry).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_taps.wgsl"
#include "conv_epilogue.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let pos = i % p.positions;
    let nc = i / p.positions;
    let co = nc % p.c_out;
    let n = nc / p.c_out;
    let g = co / p.c_out_g;
    let o = co % p.c_out_g;
    let at = out_position(pos);
    let in_size = p.in_d * p.in_h * p.in_w;
    var acc = 0.0;
    for (var c = 0u; c < p.c_in_g; c = c + 1u) {
        let base = p.x + (n * p.c_in + g * p.c_in_g + c) * in_size;
        var tap = p.w + w_index(g, o, c, 0u);
        // each axis' source index once per loop level (x_at's per-tap decode, hoisted): a tap in the
        // padding reads 0.0, still multiplied by its weight (0 * inf = NaN as in torch)
        for (var td = 0u; td < {{KD}}u; td = td + 1u) {  // the window's size is part of the pipeline
            let id = src_axis(at.x, td, p.s_d, p.p_d, p.dl_d, p.in_d);
            for (var th = 0u; th < {{KH}}u; th = th + 1u) {
                let ih = src_axis(at.y, th, p.s_h, p.p_h, p.dl_h, p.in_h);
                let inside = id >= 0 && ih >= 0;
                let line = base + (u32(max(id, 0)) * p.in_h + u32(max(ih, 0))) * p.in_w;
                for (var tw = 0u; tw < {{KW}}u; tw = tw + 1u) {
                    let iw = src_axis(at.z, tw, p.s_w, p.p_w, p.dl_w, p.in_w);
                    var v = 0.0;
                    if (inside && iw >= 0) {
                        v = ld_f32(line + u32(iw));
                    }
                    acc = acc + v * ld_f32(tap);
                    tap = tap + 1u;
                }
            }
        }
    }
    st_f32(p.y + i, finish(co, i, acc));
}

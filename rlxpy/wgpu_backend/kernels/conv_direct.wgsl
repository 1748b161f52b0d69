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
    var acc = 0.0;
    for (var c = 0u; c < p.c_in_g; c = c + 1u) {
        let row = n * p.c_in + g * p.c_in_g + c;
        var tap = w_index(g, o, c, 0u);
        for (var td = 0u; td < {{KD}}u; td = td + 1u) {  // the window's size is part of the pipeline
            for (var th = 0u; th < {{KH}}u; th = th + 1u) {
                for (var tw = 0u; tw < {{KW}}u; tw = tw + 1u) {
                    acc = acc + x_at(row, at.x, at.y, at.z, td, th, tw) * ld_f32(p.w + tap);
                    tap = tap + 1u;
                }
            }
        }
    }
    st_f32(p.y + i, finish(co, acc));
}

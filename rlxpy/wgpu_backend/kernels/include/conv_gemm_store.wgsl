// The implicit GEMMs' output (conv_gemm, conv_gemm_taps): row m = (n, output position) of the group's
// output channel o. Without a split the epilogue finishes it into y; with a K split (p.splits > 1) the
// raw sum goes to part + split * total (y's layout) and conv_split_sum finishes it.
#include "common_words.wgsl"
#include "conv_epilogue.wgsl"

fn store_y(g: u32, split: u32, m: u32, o: u32, acc: f32) {
    if (m >= p.m || o >= p.c_out_g) {
        return;
    }
    let co = g * p.c_out_g + o;
    let index = ((m / p.positions) * p.c_out + co) * p.positions + m % p.positions;
    if (p.splits > 1u) {
        st_f32(p.part + split * p.total + index, acc);  // a partial sum: conv_split_sum finishes it
    } else {
        st_f32(p.y + index, finish(co, index, acc));
    }
}

// Rows m .. m+3 of channel o.
fn store4(g: u32, split: u32, m: u32, o: u32, acc: vec4<f32>) {
    store_y(g, split, m, o, acc.x);
    store_y(g, split, m + 1u, o, acc.y);
    store_y(g, split, m + 2u, o, acc.z);
    store_y(g, split, m + 3u, o, acc.w);
}

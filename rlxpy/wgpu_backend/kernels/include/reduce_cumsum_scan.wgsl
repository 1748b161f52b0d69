// The line scan of Cumsum along any axis (reduce_cumsum_lines, backward_cumsum), one invocation per line
// t = o * inner + i of a [outer, axis_dim, inner] tensor: element r of the line at line + r * inner.
// p.exclusive == 1u: each step writes the sum before adding its own value; else after.
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

fn cumsum_line(t: u32) -> u32 {
    let o = t / p.inner;
    return o * p.axis_dim * p.inner + t % p.inner;
}

// the carry from a neighbouring chunk: the scan's output at `written`, plus its input at `source` when
// exclusive
fn cumsum_carry(written: u32, source: u32) -> f32 {
    var acc = ld_f32(written);
    if (p.exclusive == 1u) {
        acc = acc + ld_f32(source);
    }
    return acc;
}

// one step: value v into the running sum acc, the output written at `out`; the new sum
fn cumsum_step(acc: f32, v: f32, out: u32) -> f32 {
    if (p.exclusive == 1u) {
        st_f32(out, acc);
        return acc + v;
    }
    let sum = acc + v;
    st_f32(out, sum);
    return sum;
}

// dx of Pool / AdaptivePool (PoolBackward), f32: one invocation per input element x[row, id, ih, iw]
// (row = n*C + c) visits the windows that hold it and sums dy / divisor (mean), dy (sum) or, for
// max/min (extreme = 1), the dy of each window whose first tap holding the output y is this element.
// Windows, bins and divisors are the forward's (conv_pool_window.wgsl); no atomics, so the sum is
// deterministic. Bindings: 0 = arena window (u32 words), 1 = BackwardPoolParams (3-D geometry).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "conv_pool_window.wgsl"
#include "common_entry_items.wgsl"

// How many windows along one axis may hold position i: a window per tap t (windowed), or the bins
// floor(i*out/size) .. ceil((i+1)*out/size) - 1 (adaptive).
fn axis_candidates(i: u32, size: u32, out: u32, k: u32) -> i32 {
    if (p.adaptive == 1u) {
        return i32(((i + 1u) * out + size - 1u) / size - (i * out) / size);
    }
    return i32(k);
}
// The j-th window along an axis that may hold position i, or -1 (windowed: o with o*s - pad + j*dil = i).
fn axis_candidate(i: u32, j: i32, size: u32, out: u32, s: u32, pad: i32, dil: u32) -> i32 {
    if (p.adaptive == 1u) {
        return i32((i * out) / size) + j;
    }
    let num = i32(i) + pad - j * i32(dil);
    if (num < 0 || num % i32(s) != 0 || num / i32(s) >= i32(out)) {
        return -1;
    }
    return num / i32(s);
}
fn same(a: f32, b: f32) -> bool {
    return a == b || (is_nan(a) && is_nan(b));
}
// Is input position `at` (within its row) the first tap of window o that holds the window's value?
fn wins(o: PoolOutput, at: u32, value: f32) -> bool {
    for (var td = o.rd.x; td < o.rd.y; td = td + 1) {
        for (var th = o.rh.x; th < o.rh.y; th = th + 1) {
            for (var tw = o.rw.x; tw < o.rw.y; tw = tw + 1) {
                let id = o.wd.x + td * o.wd.y;
                let ih = o.wh.x + th * o.wh.y;
                let iw = o.ww.x + tw * o.ww.y;
                if (same(pool_load(o.row, id, ih, iw), value)) {
                    return (u32(id) * p.in_h + u32(ih)) * p.in_w + u32(iw) == at;
                }
            }
        }
    }
    return false;
}
// dy's share of window `out` for input position `at` whose value is xv
fn share(out: u32, at: u32, xv: f32) -> f32 {
    let g = ld_f32(p.dy + out);
    if (p.extreme == 1u) {
        let value = ld_f32(p.y + out);
        return select(0.0, g, same(xv, value) && wins(pool_output(out), at, value));
    }
    if (p.mean == 1u) {
        let o = pool_output(out);
        return g / pool_divisor(o.wd, o.wh, o.ww);
    }
    return g;
}

fn run_item(i: u32) {
    if (i >= p.total) {
        return;
    }
    let at = i % p.in_positions;
    let row = i / p.in_positions;
    let iw = at % p.in_w;
    let ih = (at / p.in_w) % p.in_h;
    let id = at / (p.in_w * p.in_h);
    let xv = ld_f32(p.x + i);
    let nd = axis_candidates(id, p.in_d, p.out_d, p.k_d);
    let nh = axis_candidates(ih, p.in_h, p.out_h, p.k_h);
    let nw = axis_candidates(iw, p.in_w, p.out_w, p.k_w);
    var acc: f32 = 0.0;
    for (var jd = 0; jd < nd; jd = jd + 1) {
        let od = axis_candidate(id, jd, p.in_d, p.out_d, p.s_d, p.p_d, p.dl_d);
        for (var jh = 0; jh < nh; jh = jh + 1) {
            let oh = axis_candidate(ih, jh, p.in_h, p.out_h, p.s_h, p.p_h, p.dl_h);
            for (var jw = 0; jw < nw; jw = jw + 1) {
                let ow = axis_candidate(iw, jw, p.in_w, p.out_w, p.s_w, p.p_w, p.dl_w);
                if (od >= 0 && oh >= 0 && ow >= 0) {
                    let out = row * p.positions + (u32(od) * p.out_h + u32(oh)) * p.out_w + u32(ow);
                    acc = acc + share(out, at, xv);
                }
            }
        }
    }
    st_f32(p.dx + i, acc);
}

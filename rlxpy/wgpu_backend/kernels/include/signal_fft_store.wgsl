// The stores of signal_fft_rows, picked by p.store_mode: element t of line b of the pass's output at
// out_base + (b / out_inner) * out_outer + (b % out_inner) * out_inner_w + t * out_elem, the imaginary
// part out_im words further (complex), or the real part only (irfft).
const STORE_REAL = 1u;

fn store_value(b: u32, t: u32, v: vec2<f32>) {
    var w = p.out_base + b * p.out_outer + t * p.out_elem;  // lines along the last axis: no division
    if (p.out_inner != 1u) {
        w = p.out_base + (b / p.out_inner) * p.out_outer + (b % p.out_inner) * p.out_inner_w + t * p.out_elem;
    }
    st_f32(w, v.x);
    if (p.store_mode != STORE_REAL) {
        st_f32(w + p.out_im, v.y);
    }
}

// The loaders of signal_fft_rows, picked by p.load_mode: element t of line b of the pass's input.
// Lines are addressed as in_base + (b / in_inner) * in_outer + (b % in_inner) * in_inner_w, elements
// in_elem words apart, an imaginary part in_im words after its real part (c64: 1, f32 block layout: N).
const LOAD_COMPLEX = 0u;
const LOAD_REAL = 1u;
const LOAD_HERMITIAN = 2u;
const LOAD_FRAME = 3u;

fn in_word(b: u32, t: u32) -> u32 {
    if (p.in_inner == 1u) {  // lines along the last axis: no division
        return p.in_base + b * p.in_outer + t * p.in_elem;
    }
    return p.in_base + (b / p.in_inner) * p.in_outer + (b % p.in_inner) * p.in_inner_w + t * p.in_elem;
}

fn load_complex(b: u32, t: u32) -> vec2<f32> {
    let w = in_word(b, t);
    return vec2<f32>(ld_f32(w), ld_f32(w + p.in_im));
}

// irfft: point t of the length-n_full Hermitian spectrum whose bins 0..bins-1 are stored: bin t, or
// conj(bin n - t) past the middle; bins not stored are 0, and the imaginary parts of bin 0 and (even n)
// bin n/2 are ignored, as numpy.fft.irfft does.
fn load_hermitian(b: u32, t: u32) -> vec2<f32> {
    let n = p.n_full;
    let mirrored = 2u * t > n;
    var bin = t;
    if (mirrored) {
        bin = n - t;
    }
    if (bin >= p.bins) {
        return vec2<f32>(0.0, 0.0);
    }
    var v = load_complex(b, bin);
    if (bin == 0u || 2u * bin == n) {
        v.y = 0.0;
    }
    if (mirrored) {
        v = conj(v);
    }
    return v;
}

// Stft: line b is frame b % in_inner of signal b / in_inner (in_inner_w = the hop); point t is
// window[t] times sample frame * hop + t - pad, one outside [0, n_full) mirrored (pad_mode 1, reflect:
// x[-i] = x[i], x[n-1+i] = x[n-1-i]) or 0 (pad_mode 0).
fn load_frame(b: u32, t: u32) -> vec2<f32> {
    let n = i32(p.n_full);
    var i = i32((b % p.in_inner) * p.in_inner_w + t) - i32(p.pad);
    if (i < 0 || i >= n) {
        if (p.pad_mode == 0u) {
            return vec2<f32>(0.0, 0.0);
        }
        if (i < 0) {
            i = -i;
        } else {
            i = 2 * (n - 1) - i;
        }
    }
    let sample = ld_f32(p.in_base + (b / p.in_inner) * p.in_outer + u32(i) * p.in_elem);
    return vec2<f32>(sample * ld_f32(p.window + t), 0.0);
}

fn load_value(b: u32, t: u32) -> vec2<f32> {
    switch (p.load_mode) {
        case 1u: {  // LOAD_REAL (rfft)
            return vec2<f32>(ld_f32(in_word(b, t)), 0.0);
        }
        case 2u: {  // LOAD_HERMITIAN
            return load_hermitian(b, t);
        }
        case 3u: {  // LOAD_FRAME
            return load_frame(b, t);
        }
        default: {  // LOAD_COMPLEX
            return load_complex(b, t);
        }
    }
}

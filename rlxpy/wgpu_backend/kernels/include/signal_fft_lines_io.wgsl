// signal_fft_lines' arena access, loaders and stores. The arena is bound as pairs of words: a c64 point
// at an even word is one 8-byte load or store; a single f32 word is a component of a pair. Line r of
// p.rows is (batch b, sub-line s) = (r / sub_rows, r % sub_rows); its point k is element
// t = s * t_sub + k * t_k of batch in_line0 + b of the input Lines (word in_base + (b / in_inner) *
// in_outer + (b % in_inner) * in_inner_w + t * in_elem, the imaginary part in_im words further), and
// element s * o_sub + k * o_k of batch out_line0 + b of the output Lines. Loaders: complex
// pairs, real, Hermitian (irfft), Stft frame, complex words (any in_im); stores: complex pairs, real,
// complex words; each variant pastes one of each ({{LOAD}}, {{STORE}}: fewer lines for the shader compiler). Roots, chirps and Bluestein's kernel come from the plan table (pairs).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<vec2<u32>>;
@group(0) @binding(1) var<uniform> p: {{PARAMS}};

fn cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
fn conj(a: vec2<f32>) -> vec2<f32> { return vec2<f32>(a.x, -a.y); }

fn ld_pair(i: u32) -> vec2<f32> { return bitcast<vec2<f32>>(buf[i]); }
fn st_pair(i: u32, v: vec2<f32>) { buf[i] = bitcast<vec2<u32>>(v); }
fn ld_word(w: u32) -> f32 { return bitcast<f32>(buf[w >> 1u][w & 1u]); }
fn st_word(w: u32, v: f32) { buf[w >> 1u][w & 1u] = bitcast<u32>(v); }

// roots[i] = exp(-2 pi i / M) (p.table: the pair of roots[0])
fn root(i: u32) -> vec2<f32> { return ld_pair(p.table + i); }

// the four-step twist roots[e]: one load, or roots[e & mask] * roots[e - (e & mask)] for a large table
// (both factors from small, cached slices of it)
fn twist_root(e: u32) -> vec2<f32> {
    if (p.twist_mask == 0u) {
        return root(e);
    }
    let low = e & p.twist_mask;
    return cmul(root(low), root(e - low));
}

struct LineIo {
    b_in: u32,  // batch of the input Lines
    s: u32,  // sub-line
    in_word: u32,  // word of the batch's element 0
    out_word: u32,
}

fn lines_word(base: u32, inner: u32, outer: u32, inner_w: u32, b: u32) -> u32 {
    if (inner == 1u) {
        return base + b * outer;
    }
    return base + (b / inner) * outer + (b % inner) * inner_w;
}

fn line_io(r: u32) -> LineIo {
    var b = r;
    var s = 0u;
    if (p.sub_rows != 1u) {
        b = r / p.sub_rows;
        s = r - b * p.sub_rows;
    }
    let b_in = p.in_line0 + b;
    let b_out = p.out_line0 + b;
    return LineIo(b_in, s, lines_word(p.in_base, p.in_inner, p.in_outer, p.in_inner_w, b_in),
                  lines_word(p.out_base, p.out_inner, p.out_outer, p.out_inner_w, b_out));
}

// irfft: element t of the length-n_full Hermitian spectrum whose bins 0..bins-1 are stored: bin t, or
// conj(bin n - t) past the middle; bins not stored are 0, and the imaginary parts of bin 0 and (even n)
// bin n/2 are ignored, as numpy.fft.irfft does.
fn load_hermitian(word: u32, t: u32) -> vec2<f32> {
    let n = p.n_full;
    let mirrored = 2u * t > n;
    var bin = t;
    if (mirrored) {
        bin = n - t;
    }
    if (bin >= p.bins) {
        return vec2<f32>(0.0, 0.0);
    }
    let w = word + bin * p.in_elem;
    var v = vec2<f32>(ld_word(w), ld_word(w + p.in_im));
    if (bin == 0u || 2u * bin == n) {
        v.y = 0.0;
    }
    if (mirrored) {
        v = conj(v);
    }
    return v;
}

// Stft: batch b is frame b % in_inner of signal b / in_inner (in_inner_w = the hop); element t is
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
    let sample = ld_word(p.in_base + (b / p.in_inner) * p.in_outer + u32(i) * p.in_elem);
    return vec2<f32>(sample * ld_word(p.window + t), 0.0);
}

// the loaders (one per variant, {{LOAD}}) of element t at word w of batch io.b_in
fn load_complex(io: LineIo, t: u32, w: u32) -> vec2<f32> {
    return ld_pair(w >> 1u);
}
fn load_real(io: LineIo, t: u32, w: u32) -> vec2<f32> {
    return vec2<f32>(ld_word(w), 0.0);
}
fn load_hermitian_at(io: LineIo, t: u32, w: u32) -> vec2<f32> {
    return load_hermitian(io.in_word, t);
}
fn load_frame_at(io: LineIo, t: u32, w: u32) -> vec2<f32> {
    return load_frame(io.b_in, t);
}
fn load_complex_words(io: LineIo, t: u32, w: u32) -> vec2<f32> {
    return vec2<f32>(ld_word(w), ld_word(w + p.in_im));
}

// the stores (one per variant, {{STORE}}) of element v at word w
fn store_complex(w: u32, v: vec2<f32>) {
    st_pair(w >> 1u, v);
}
fn store_real(w: u32, v: vec2<f32>) {
    st_word(w, v.x);
}
fn store_complex_words(w: u32, v: vec2<f32>) {
    st_word(w, v.x);
    st_word(w + p.out_im, v.y);
}

// The variant's epilogue steps (constants: the shader compiler drops the others): times the chirp on
// load (Bluestein), the four-step twist on store, times the chirp or kernel spectrum on store.
const PRE: bool = {{PRE}};
const TWIST: bool = {{TWIST}};
const POST: bool = {{POST}};

// point k of the line: 0 past load_len (Bluestein's zero padding); conj for an inverse transform
// (conj(forward(conj(x)))), times the chirp (Bluestein)
fn load_at(io: LineIo, k: u32) -> vec2<f32> {
    let t = io.s * p.t_sub + k * p.t_k;
    if (t >= p.load_len) {
        return vec2<f32>(0.0, 0.0);
    }
    var v = {{LOAD}}(io, t, io.in_word + t * p.in_elem);
    v.y = select(v.y, -v.y, p.conj_in == 1u);
    if (PRE) {
        v = cmul(v, ld_pair(p.pre + t));
    }
    return v;
}

// point k of the line's transform: twisted (four-step: sub-line s, frequency k), then, kept below
// out_len: conj, times the chirp, conj, scaled
fn store_at(io: LineIo, k: u32, value: vec2<f32>) {
    var v = value;
    if (TWIST) {
        v = cmul(v, twist_root(io.s * k));
    }
    let t = io.s * p.o_sub + k * p.o_k;
    if (t >= p.out_len) {
        return;
    }
    if (POST) {
        v.y = select(v.y, -v.y, p.conj_a == 1u);
        v = cmul(v, ld_pair(p.post + t));
    }
    v = v * vec2<f32>(p.scale, select(p.scale, -p.scale, p.conj_b == 1u));
    {{STORE}}(io.out_word + t * p.out_elem, v);
}

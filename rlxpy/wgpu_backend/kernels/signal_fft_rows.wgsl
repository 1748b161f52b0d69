// Mixed-radix Stockham FFT of p.len points per line, p.per_wg lines per workgroup of {{WG}} lanes, in two
// halves of {{CAP}} points of workgroup memory. Line r of p.rows is (batch b, sub-line s) = (r / sub_rows,
// r % sub_rows); its point k is element t = s * t_sub + k * t_k of b's input (load_point) and element
// t = s * o_sub + k * o_k of b's output (store_point), so one kernel runs a whole transform or one pass of
// a four-step one (strided columns, then rows). Roots of unity, Bluestein's chirp and kernel come from the
// plan table (ops/signal.py): nothing is evaluated with sin/cos here. Bindings: 0 = arena window (u32
// words), 1 = SignalFftRowsParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "signal_fft_complex.wgsl"
#include "signal_fft_load.wgsl"
#include "signal_fft_store.wgsl"
#include "signal_fft_stages.wgsl"

// A lane's walk over the workgroup's (line, point) pairs, one every {{WG}}: points fastest, or lines
// fastest when adjacent lines are adjacent in memory (coalesced columns). Stepped without dividing.
struct Walk {
    fast: u32,
    slow: u32,
    size: u32,  // of the fast index
    fast_step: u32,
    slow_step: u32,
    lines_fastest: bool,
}

fn walk_start(lane: u32, lines_fastest: u32) -> Walk {
    var size = p.len;
    if (lines_fastest == 1u) {
        size = p.per_wg;
    }
    return Walk(lane % size, lane / size, size, {{WG}}u % size, {{WG}}u / size, lines_fastest == 1u);
}

fn walk_next(w: ptr<function, Walk>) {
    (*w).fast = (*w).fast + (*w).fast_step;
    (*w).slow = (*w).slow + (*w).slow_step;
    if ((*w).fast >= (*w).size) {
        (*w).fast = (*w).fast - (*w).size;
        (*w).slow = (*w).slow + 1u;
    }
}

fn walk_line(w: Walk) -> u32 {
    return select(w.slow, w.fast, w.lines_fastest);
}

fn walk_point(w: Walk) -> u32 {
    return select(w.fast, w.slow, w.lines_fastest);
}

// (batch, sub-line) of line r; one pass of a whole transform has one sub-line per batch (no division)
fn batch_of(r: u32) -> vec2<u32> {
    if (p.sub_rows == 1u) {
        return vec2<u32>(r, 0u);
    }
    return vec2<u32>(r / p.sub_rows, r % p.sub_rows);
}

fn load_point(r: u32, k: u32) -> vec2<f32> {
    let bs = batch_of(r);
    let b = bs.x;
    let t = bs.y * p.t_sub + k * p.t_k;
    if (t >= p.load_len) {
        return vec2<f32>(0.0, 0.0);  // zero padding (Bluestein's convolution length)
    }
    var v = load_value(p.in_line0 + b, t);  // in_line0: the first line of a chunk of lines
    if (p.conj_in == 1u) {
        v = conj(v);  // an inverse transform is conj(forward(conj(x)))
    }
    if (p.has_pre == 1u) {
        v = cmul(v, pair(p.pre, t));
    }
    return v;
}

fn store_point(r: u32, k: u32, value: vec2<f32>) {
    let bs = batch_of(r);
    let b = bs.x;
    let s = bs.y;
    let t = s * p.o_sub + k * p.o_k;
    var v = value;
    if (p.twiddle == 1u) {
        v = cmul(v, pair(p.table, s * k));  // four-step: column s, frequency k
    }
    if (t >= p.out_len) {
        return;
    }
    if (p.conj_a == 1u) {
        v = conj(v);
    }
    if (p.has_post == 1u) {
        v = cmul(v, pair(p.post, t));
    }
    if (p.conj_b == 1u) {
        v = conj(v);
    }
    store_value(p.out_line0 + b, t, v * p.scale);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = (wid.x + wid.y * nwg.x) * p.per_wg;
    if (first >= p.rows) {
        return;  // the whole workgroup: barriers stay in uniform control flow
    }
    let points = p.per_wg * p.len;
    var walk = walk_start(lane, p.load_lines_fastest);
    for (var i = lane; i < points; i = i + {{WG}}u) {
        let line = walk_line(walk);
        let point = walk_point(walk);
        var v = vec2<f32>(0.0, 0.0);
        if (first + line < p.rows) {
            v = load_point(first + line, point);
        }
        sh[line * p.len + point] = v;
        walk_next(&walk);
    }
    workgroupBarrier();
    var done = run_stages(lane, 0u);
    if (p.has_mid == 1u) {
        // Bluestein in one workgroup: times the kernel's spectrum, then the inverse transform as
        // conj(forward(conj(.))), whose outer conj store_point applies (conj_a)
        let to = {{CAP}}u - done;
        for (var i = lane; i < points; i = i + {{WG}}u) {
            sh[to + i] = conj(cmul(sh[done + i], pair(p.mid, i % p.len)));
        }
        workgroupBarrier();
        done = run_stages(lane, to);
    }
    walk = walk_start(lane, p.store_lines_fastest);
    for (var i = lane; i < points; i = i + {{WG}}u) {
        let line = walk_line(walk);
        let point = walk_point(walk);
        if (first + line < p.rows) {
            store_point(first + line, point, sh[done + line * p.len + point]);
        }
        walk_next(&walk);
    }
}

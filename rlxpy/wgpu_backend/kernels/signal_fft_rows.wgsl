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

// The line and point of slot i of the workgroup memory (slot = line * len + point), visited lines-fastest
// when adjacent lines are adjacent in memory (coalesced columns) and points-fastest otherwise.
fn slot_of(i: u32, lines_fastest: u32) -> u32 {
    if (lines_fastest == 1u) {
        return (i % p.per_wg) * p.len + i / p.per_wg;
    }
    return i;
}

fn load_point(r: u32, k: u32) -> vec2<f32> {
    let b = r / p.sub_rows;
    let t = (r % p.sub_rows) * p.t_sub + k * p.t_k;
    if (t >= p.load_len) {
        return vec2<f32>(0.0, 0.0);  // zero padding (Bluestein's convolution length)
    }
    var v = load_value(b, t);
    if (p.conj_in == 1u) {
        v = conj(v);  // an inverse transform is conj(forward(conj(x)))
    }
    if (p.has_pre == 1u) {
        v = cmul(v, pair(p.pre, t));
    }
    return v;
}

fn store_point(r: u32, k: u32, value: vec2<f32>) {
    let b = r / p.sub_rows;
    let s = r % p.sub_rows;
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
    store_value(b, t, v * p.scale);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = (wid.x + wid.y * nwg.x) * p.per_wg;
    if (first >= p.rows) {
        return;  // the whole workgroup: barriers stay in uniform control flow
    }
    let points = p.per_wg * p.len;
    for (var i = lane; i < points; i = i + {{WG}}u) {
        let slot = slot_of(i, p.load_lines_fastest);
        let r = first + slot / p.len;
        var v = vec2<f32>(0.0, 0.0);
        if (r < p.rows) {
            v = load_point(r, slot % p.len);
        }
        sh[slot] = v;
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
    for (var i = lane; i < points; i = i + {{WG}}u) {
        let slot = slot_of(i, p.store_lines_fastest);
        let r = first + slot / p.len;
        if (r < p.rows) {
            store_point(r, slot % p.len, sh[done + slot]);
        }
    }
}

// Mixed-radix Stockham FFTs of lines of one length, in registers: {{LINES}} lines per workgroup,
// {{THREADS}} invocations per line, each holding its butterflies' points in registers (the stages are
// straight-line code generated per length by lowering/signal_fft_code.py); workgroup memory only between
// stages, {{GROUP}} lines at a time. Bindings: 0 = arena window (pairs of u32 words), 1 = SignalFftLinesParams.
#include "signal_fft_lines_io.wgsl"

var<workgroup> sh: array<vec2<f32>, {{SHARED}}>;

// bank swizzle: index bits 0-3 XOR the bit-reversed bits 4-7, and XOR lx, the line's key (lines side by
// side: their slots are whole blocks of 16 points); a bijection on every 16 points
fn sw(i: u32, lx: u32) -> u32 {
    return i ^ ((reverseBits(i >> 4u) >> 28u) ^ lx);
}

// the swizzle key of a line's slot (the same for the invocations that write and that read it)
fn line_key(line: u32) -> u32 {
    return {{LINE_XOR}};
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = (wid.x + wid.y * nwg.x) * {{LINES}}u;
    if (first >= p.rows) {
        return;  // the whole workgroup: barriers stay in uniform control flow
    }
    // {{FAST}} lines adjacent among the invocations, then the points of those lines, then the next lines
    let t = (lane / {{FAST}}u) % {{THREADS}}u;
    let line = lane % {{FAST}}u + {{FAST}}u * (lane / ({{FAST}}u * {{THREADS}}u));
    let live = first + line < p.rows;
    let io = line_io(first + line);
    let slot = (line % {{GROUP}}u) * {{LEN}}u;
    let turn = line / {{GROUP}}u;  // the exchange round of this line
    let lx = line_key(line);
    // the last stage's grouping: {{FAST_OUT}} lines adjacent (the same values where FAST_OUT = FAST)
    let t_o = (lane / {{FAST_OUT}}u) % {{THREADS}}u;
    let line_o = lane % {{FAST_OUT}}u + {{FAST_OUT}}u * (lane / ({{FAST_OUT}}u * {{THREADS}}u));
    let live_o = first + line_o < p.rows;
    let io_o = line_io(first + line_o);
    let slot_o = (line_o % {{GROUP}}u) * {{LEN}}u;
    let turn_o = line_o / {{GROUP}}u;
    let lx_o = line_key(line_o);
{{BODY}}
}

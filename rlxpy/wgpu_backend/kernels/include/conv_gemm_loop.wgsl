// The implicit GEMMs' K loop (conv_gemm, conv_gemm_taps), pasted at the end of main() once the K start
// (k0 / c0) and the step count `steps` are set: the registers (REGS) and sums, the first step loaded
// (LOAD) and staged (STAGE) into buffer 0, then `steps` K steps, the next step's loads (from where the
// NEXT statement moves the start) issued into registers before this step's sums (FMA), then staged into
// the other of the two workgroup buffers; one barrier per step; then the stores (STORE). Needs tx, ty,
// A_STEP, W_STEP and WV (tile_w vectors per thread and k).
{{REGS}}
    var acc = array<vec4<f32>, {{ACC}}>();
    var b = 0u;
{{LOAD}}
{{STAGE}}
    workgroupBarrier();
    for (var s = 0u; s < steps; s = s + 1u) {
        let more = s + 1u < steps;
        if (more) {  // issued before the sums below, so the loads' latency hides behind them
            {{NEXT}}
{{LOAD}}
        }
        let ta = (s & 1u) * A_STEP + tx;
        let tb = (s & 1u) * W_STEP + ty * WV;
{{FMA}}
        if (more) {  // the other buffer: everyone finished reading it before the last barrier
            b = (s + 1u) & 1u;
{{STAGE}}
        }
        workgroupBarrier();
    }
{{STORE}}

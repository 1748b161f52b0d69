// Carry pass of the chunked selective scan: one invocation per (state n, batch b, channel c) walks the
// chunks in order, replacing each chunk's local end state (scan_selective, phase 1) by the state
// entering that chunk: carry = decay[k] * carry + end[k], from the carried state (has_state) or 0.
// With has_state the final carry is the new carried state. Scratch as in scan_selective.
// Bindings: 0 = arena window, 1 = ScanSelectiveCarryParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

fn run_item(i: u32) {
    let plane = p.batch * p.channels;
    if (i >= plane * p.states) {
        return;
    }
    let n = i / plane;
    let lane = i % plane;  // b * channels + c
    var carry = 0.0;
    if (p.has_state == 1u) {
        carry = ld_f32(p.state + lane * p.states + n);
    }
    for (var k = 0u; k < p.chunks; k = k + 1u) {
        let at = (k * p.states + n) * plane + lane;
        let end = ld_f32(p.carry + at);
        st_f32(p.carry + at, carry);
        carry = ld_f32(p.decay + at) * carry + end;
    }
    if (p.has_state == 1u) {
        st_f32(p.state + lane * p.states + n, carry);
    }
}

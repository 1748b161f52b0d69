// d table of Gather: out[o, r, t] = sum over k with row(idx[k]) == r of dy[o, k, t], row() truncating and
// clamping like the forward (shape_gather), so indices outside the table add into its first or last row.
// Workgroup (row r, column block, o), numbered r fastest over a grid folded into y: {{WG}} lanes over t read
// the indices together (one broadcast load each) and add the matching dy rows in index order:
// deterministic, no atomics. Indices [start, start +
// count) per dispatch; a dispatch after the first adds to what is there. Bindings: 0 = arena window
// (u32 words), 1 = BackwardGatherParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "shape_gather_rows.wgsl"

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let group = wid.x + wid.y * nwg.x;
    let r = group % p.dim;
    let t = (group / p.dim) % p.blocks * {{WG}}u + lane;
    let o = group / p.dim / p.blocks;
    if (o >= p.outer || t >= p.inner) {
        return;
    }
    let out = p.y + (o * p.dim + r) * p.inner + t;
    var acc = select(0.0, ld_f32(out), p.accumulate == 1u);
    for (var k = p.start; k < p.start + p.count; k = k + 1u) {
        if (row_of(k) == r) {
            acc = acc + ld_f32(p.dy + (o * p.count_all + k) * p.inner + t);
        }
    }
    st_f32(out, acc);
}

// d table of Gather: out[o, r, t] = sum over k with row(idx[k]) == r of dy[o, k, t], row() truncating and
// clamping like the forward (shape_gather), so indices outside the table add into its first or last row.
// Workgroup (row r, column block, o), numbered r fastest over a grid folded into y: {{WG}} lanes over t read
// the indices together (one broadcast load each) and add the matching dy rows in index order:
// deterministic, no atomics. Indices [start, start +
// count) per dispatch; a dispatch after the first adds to what is there. Bindings: 0 = arena window
// (u32 words), 1 = BackwardGatherParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"

// Row picked by index k, read as the index dtype {{INDEX}}: truncated, then clamped into [0, dim - 1].
fn row_i32(k: u32) -> u32 {
    let v = bitcast<i32>(buf[p.idx + k]);
    return select(min(u32(v), p.dim - 1u), 0u, v < 0);
}
fn row_u32(k: u32) -> u32 {
    return min(buf[p.idx + k], p.dim - 1u);
}
fn row_f32(k: u32) -> u32 {
    let v = bitcast<f32>(buf[p.idx + k]);
    return select(min(u32(v), p.dim - 1u), 0u, !(v >= 1.0));
}
fn row_i64(k: u32) -> u32 {
    let low = buf[p.idx + 2u * k];
    let high = buf[p.idx + 2u * k + 1u];
    if ((high & 0x80000000u) != 0u) {
        return 0u;
    }
    return select(min(low, p.dim - 1u), p.dim - 1u, high != 0u);
}
fn row_of(k: u32) -> u32 {
    return row_{{INDEX}}(k);
}

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

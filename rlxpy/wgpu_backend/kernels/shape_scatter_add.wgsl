// y = zeros([out_dim, width]); y[row(idx[u]), c] += updates[u, c] for u = 0..count-1 in order (numpy.add.at).
// One thread per column c: it owns y[:, c], zeroes it, then accumulates sequentially, so the result is deterministic.
// A dispatch zeroes rows [zero_start, zero_end) and adds updates [start, end): the lowering splits the
// two walks over several dispatches in order (lavapipe's loop limit).
// Bindings: 0 = arena window (u32 words), 1 = ShapeScatterAddParams (word offsets x, idx, y; rows outside skipped).
#include "common_arena.wgsl"
#include "common_entry_items.wgsl"

const SKIP: u32 = 0xffffffffu;

// Output row of update u (fractions truncate), or SKIP when it falls outside [0, out_dim), read as the
// index dtype {{INDEX}}.
fn row_i32(u: u32) -> u32 {
    let v = bitcast<i32>(buf[p.idx + u]);
    return select(SKIP, u32(v), v >= 0 && u32(v) < p.out_dim);
}
fn row_u32(u: u32) -> u32 {
    let v = buf[p.idx + u];
    return select(SKIP, v, v < p.out_dim);
}
fn row_f32(u: u32) -> u32 {
    let v = bitcast<f32>(buf[p.idx + u]);
    let r = u32(v);
    return select(SKIP, r, v > -1.0 && r < p.out_dim);
}
fn row_i64(u: u32) -> u32 {
    let low = buf[p.idx + 2u * u];
    let high = buf[p.idx + 2u * u + 1u];
    return select(SKIP, low, high == 0u && low < p.out_dim);
}
fn row_of(u: u32) -> u32 {
    return row_{{INDEX}}(u);
}

// acc + v on the raw words of the element type.
fn accumulate(acc: u32, v: u32) -> u32 {
    return {{ADD}};
}

fn run_item(c: u32) {
    if (c >= p.width) {
        return;
    }
    for (var r = p.zero_start; r < p.zero_end; r = r + 1u) {
        buf[p.y + r * p.width + c] = 0u;
    }
    for (var u = p.start; u < p.end; u = u + 1u) {
        let r = row_of(u);
        if (r != SKIP) {
            let at = p.y + r * p.width + c;
            buf[at] = accumulate(buf[at], buf[p.x + u * p.width + c]);
        }
    }
}

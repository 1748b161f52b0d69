// y[i, :] = dequant(table[clamp(idx[i])]): embedding rows of a GGML table, dequantised exactly (gguf-py bits).
// One workgroup per index (grid folded into y past 65535); threads stride over chunks of 4 elements.
// Bindings: 0 = arena window (u32 words; idx, y word offsets, table a BYTE offset), 1 = QuantGgufGatherParams.
#include "common_arena.wgsl"
#include "quant_gguf_decode_{{DECODER}}.wgsl"
#include "quant_gguf_dq4.wgsl"
#include "common_entry_rows.wgsl"

// Index i truncated toward zero and clamped into [0, rows - 1] (the reference's clamp_indices), read
// as the index dtype {{INDEX}}.
fn row_f32(i: u32) -> u32 {
    let v = trunc(bitcast<f32>(buf[p.idx + i]));
    if (!(v > 0.0)) { return 0u; }  // negative or NaN
    return min(u32(min(v, f32(p.rows - 1u))), p.rows - 1u);
}
fn row_i32(i: u32) -> u32 {
    return u32(clamp(bitcast<i32>(buf[p.idx + i]), 0, i32(p.rows) - 1));
}
fn row_u32(i: u32) -> u32 {
    return min(buf[p.idx + i], p.rows - 1u);
}
fn row_of(i: u32) -> u32 {
    return row_{{INDEX}}(i);
}

fn run_row(i: u32, lane: u32) {
    if (i >= p.count) {
        return;
    }
    let rb = p.table + row_of(i) * p.row_bytes;
    let chunks = (p.k + 3u) >> 2u;
    let y_base = p.y + i * p.k;
    for (var c = lane; c < chunks; c = c + 256u) {
        let e = c << 2u;
        let v = dq4(rb, e);
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (e + j < p.k) {
                buf[y_base + e + j] = bitcast<u32>(v[j]);
            }
        }
    }
}

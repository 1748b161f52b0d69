// y[i, :] = dequant(table[clamp(idx[i])]): embedding rows of a GGML table, dequantised exactly (gguf-py bits).
// One workgroup per index (grid folded into y past 65535); threads stride over chunks of 4 elements.
// Bindings: 0 = arena window (u32 words; idx, y word offsets, table a BYTE offset), 1 = QuantGgufGatherParams.
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: QuantGgufGatherParams;

{{DECODE}}

// index i truncated toward zero and clamped into [0, rows - 1] (the reference's clamp_indices)
fn row_of(i: u32) -> u32 {
    {{INDEX}}
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = wid.x + wid.y * nwg.x;
    if (i >= p.count) {
        return;
    }
    let rb = p.table + row_of(i) * p.row_bytes;
    let chunks = (p.k + 3u) >> 2u;
    let y_base = p.y + i * p.k;
    for (var c = lid.x; c < chunks; c = c + 256u) {
        let e = c << 2u;
        let v = dq4(rb, e);
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (e + j < p.k) {
                buf[y_base + e + j] = bitcast<u32>(v[j]);
            }
        }
    }
}

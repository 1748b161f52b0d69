// y[o, k, t] = table[o, clamp(trunc(idx[k]), 0, dim-1), t]: numpy.take along one axis (embedding lookup at axis 0).
// 4/8-byte elements: one thread per output word; 1/2-byte: one thread per packed output word (no shared words).
// Bindings: 0 = arena window (u32 words), 1 = ShapeGatherParams (word offsets x, idx, y; inner/count/dim in elements).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ShapeGatherParams;

// Row picked by index k, clamped into [0, dim - 1]; the body depends on the index dtype.
fn row_of(k: u32) -> u32 {
    {{ROW}}
}

// Table element read by output element e.
fn source(e: u32) -> u32 {
    let t = e % p.inner;
    let rest = e / p.inner;
    let k = rest % p.count;
    let o = rest / p.count;
    return (o * p.dim + row_of(k)) * p.inner + t;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * {{WG}}u;
    if (w >= p.words) {
        return;
    }
    if (p.elem_bytes >= 4u) {
        let wpe = p.elem_bytes / 4u;
        buf[p.y + w] = buf[p.x + source(w / wpe) * wpe + w % wpe];
        return;
    }
    // packed 1/2-byte elements; the padding past the last element is written as zero bits
    let per = 4u / p.elem_bytes;
    let bits = 8u * p.elem_bytes;
    let mask = (1u << bits) - 1u;
    var word = 0u;
    for (var j = 0u; j < per; j = j + 1u) {
        let e = w * per + j;
        if (e < p.n) {
            let s = source(e);
            word = word | (((buf[p.x + s / per] >> ((s % per) * bits)) & mask) << (j * bits));
        }
    }
    buf[p.y + w] = word;
}

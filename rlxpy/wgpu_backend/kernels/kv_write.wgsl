// cache[(pos + r) * width + c] = rows[r * width + c] for r < n_rows with pos read from the arena
// at run time (a KV-cache append); rows past the capacity are dropped. One thread per word.
// Bindings: 0 = arena window (u32 words), 1 = KvWriteParams (word offsets in the window).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: KvWriteParams;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if (i >= p.n) {
        return;
    }
    let r = i / p.width;
    let c = i % p.width;
    let row = buf[p.pos] + r;
    if (row < p.capacity) {
        buf[p.cache + row * p.width + c] = buf[p.rows + i];
    }
}

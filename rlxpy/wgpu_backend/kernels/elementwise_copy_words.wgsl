// y[i] = x[i] for n 32-bit words: a plain copy inside the arena (copy_buffer_to_buffer refuses
// a source and destination in the same buffer). One thread per word.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseCopyWordsParams (word offsets in the window).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: ElementwiseCopyWordsParams;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * {{WG}}u;
    if (i >= p.n) {
        return;
    }
    buf[p.y + i] = buf[p.x + i];
}

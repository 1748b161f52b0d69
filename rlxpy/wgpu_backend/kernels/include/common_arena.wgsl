// The arena window (binding 0, as u32 words) and the kernel's uniform record (binding 1): #params is
// the struct generated from the kernel's Python layout, {{PARAMS}} its name. aw(i): arena word i, the
// read the GGUF decoders use (include/matmul_access_vec4 gives it over a vec4 binding).
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: {{PARAMS}};
fn aw(i: u32) -> u32 { return buf[i]; }

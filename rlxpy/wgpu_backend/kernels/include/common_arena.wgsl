// The arena window (binding 0, as u32 words) and the kernel's uniform record (binding 1): #params is
// the struct generated from the kernel's Python layout, {{PARAMS}} its name.
#params

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: {{PARAMS}};

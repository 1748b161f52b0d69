// The arena window bound as vec4 words (binding 0) and the kernel's uniform record (binding 1), for
// kernels whose every offset and length is a multiple of 4 elements: each load and store moves 16
// bytes. #params is the struct generated from the kernel's Python layout, {{PARAMS}} its name.
#params

@group(0) @binding(0) var<storage, read_write> buf: array<vec4<u32>>;
@group(0) @binding(1) var<uniform> p: {{PARAMS}};

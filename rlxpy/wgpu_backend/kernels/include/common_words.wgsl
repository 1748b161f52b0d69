// Typed loads and stores of one arena word (``buf`` bound as array<u32>): kernels that mix dtypes
// convert per element. The lowerers name these functions in per-use values (kernels/wgsl.py).
fn ld_f32(i: u32) -> f32 { return bitcast<f32>(buf[i]); }
fn ld_i32(i: u32) -> i32 { return bitcast<i32>(buf[i]); }
fn ld_u32(i: u32) -> u32 { return buf[i]; }
fn st_f32(i: u32, v: f32) { buf[i] = bitcast<u32>(v); }
fn st_i32(i: u32, v: i32) { buf[i] = bitcast<u32>(v); }
fn st_u32(i: u32, v: u32) { buf[i] = v; }

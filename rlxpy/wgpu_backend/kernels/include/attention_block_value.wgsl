// One element of a rows x cols block of a row-major tensor, for kernels that stage such blocks in
// workgroup memory (attention_flash, the attention backward kernels); needs the constant D (the row
// length that is in range, head_dim) and ld_f32 (common_words).
// element e of the block at (row0, col0): (row e / cols, col e % cols); 0 outside [0, rows_end) x [0, D)
fn block_value(base: u32, stride: u32, row0: u32, rows_end: u32, col0: u32, cols: u32, e: u32) -> f32 {
    let r = e / cols;
    let c = e % cols;
    var x = 0.0;
    if (row0 + r < rows_end && col0 + c < D) {
        x = ld_f32(base + (row0 + r) * stride + col0 + c);
    }
    return x;
}

// One element of a rows x cols block of a row-major tensor, for kernels that stage such blocks in
// workgroup memory (attention_flash, the attention backward kernels); needs the constant D (the row
// length that is in range, head_dim) and ld_f32 (common_words); stage_blocks also the workgroup array
// tiles and the constants DS (dims per chunk) and QS (a staged row's stride).
// element e of the block at (row0, col0): (row e / cols, col e % cols); 0 outside [0, rows_end) x [0, D).
// Branch-free (outside, it loads element 0 and drops it): a load under a branch is not hoisted, and
// the staging loads of a tile then took one memory round trip each.
fn block_value(base: u32, stride: u32, row0: u32, rows_end: u32, col0: u32, cols: u32, e: u32) -> f32 {
    let r = e / cols;
    let c = e % cols;
    let inside = row0 + r < rows_end && col0 + c < D;
    let x = ld_f32(base + select(0u, (row0 + r) * stride + col0 + c, inside));
    return select(0.0, x, inside);
}

// Dims d0 .. d0 + DS of 64 rows of a (4 per thread, staged from tiles[0]) and of 32 rows of b (2 per
// thread, from tiles[b_at]) into workgroup memory: every load is issued before any store.
fn stage_blocks(lane: u32, a: u32, a_stride: u32, a_row0: u32, a_end: u32, b: u32, b_stride: u32, b_row0: u32,
                b_end: u32, d0: u32, b_at: u32) {
    let a0 = block_value(a, a_stride, a_row0, a_end, d0, DS, lane);
    let a1 = block_value(a, a_stride, a_row0, a_end, d0, DS, lane + 256u);
    let a2 = block_value(a, a_stride, a_row0, a_end, d0, DS, lane + 512u);
    let a3 = block_value(a, a_stride, a_row0, a_end, d0, DS, lane + 768u);
    let b0 = block_value(b, b_stride, b_row0, b_end, d0, DS, lane);
    let b1 = block_value(b, b_stride, b_row0, b_end, d0, DS, lane + 256u);
    tiles[lane / DS * QS + lane % DS] = a0;
    tiles[(lane + 256u) / DS * QS + lane % DS] = a1;
    tiles[(lane + 512u) / DS * QS + lane % DS] = a2;
    tiles[(lane + 768u) / DS * QS + lane % DS] = a3;
    tiles[b_at + lane / DS * QS + lane % DS] = b0;
    tiles[b_at + (lane + 256u) / DS * QS + lane % DS] = b1;
}

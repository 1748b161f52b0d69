// affine4(blk, col): no scale (fp8): 1 inside the row, 0 past it.
fn affine4(blk: u32, col: u32) -> Affine {
    return Affine(col_mask(col), vec4<f32>(0.0));
}

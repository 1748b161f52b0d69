// affine4(blk, col): f32 scales and zero points per (K-block, column) (int8_asym).
fn affine4(blk: u32, col: u32) -> Affine {
    return Affine(words4(p.scale + blk * p.n, col), words4(p.zp + blk * p.n, col));
}

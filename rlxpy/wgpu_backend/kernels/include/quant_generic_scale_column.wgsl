// affine4(blk, col): f32 scales per (K-block, column), no zero point (int8, int4).
fn affine4(blk: u32, col: u32) -> Affine {
    return Affine(words4(p.scale + blk * p.n, col), vec4<f32>(0.0));
}

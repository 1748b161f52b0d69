// affine4(blk, col): nvfp4's e4m3 byte scales per (16 rows of K, column) times the global scale, the
// first value of input 3 read as {{GLOBAL_SCALE}}.
fn global_scale() -> f32 {
    return {{GLOBAL_SCALE}};
}

fn affine4(blk: u32, col: u32) -> Affine {
    let s = ld_word(p.scale + blk * p.n + col);
    let group = vec4<f32>(fp8_e4m3(s & 0xffu), fp8_e4m3((s >> 8u) & 0xffu),
                          fp8_e4m3((s >> 16u) & 0xffu), fp8_e4m3(s >> 24u));
    return Affine(group * global_scale() * col_mask(col), vec4<f32>(0.0));
}

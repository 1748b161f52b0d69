// The implicit GEMMs' entry (conv_gemm, conv_gemm_taps), pasted at the top of main(lid, wid): thread
// (tx, ty) and its flat index, the group g and the K split of grid z (groups x splits), this thread's A
// row t (gemm_row), the tile's first output channel o0 and the elements of one input image.
    let tx = lid.x;
    let ty = lid.y;
    let flat = ty * 16u + tx;
    let g = wid.z % p.groups;
    let split = wid.z / p.groups;
    let t = gemm_row(flat, g, wid.x);
    let o0 = wid.y * BN;
    let in_size = p.in_d * p.in_h * p.in_w;

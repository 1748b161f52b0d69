// The implicit GEMMs' (conv_gemm, conv_gemm_taps) A row of one thread, fixed for the whole K loop:
// thread `flat` of the 16 x 16 workgroup of row tile `tile` loads A row m0 + am (am = flat % BM) at k
// rows ak + r * 256/BM; its output position (od, oh, ow) and its input row base (n * C_in + the
// group's first channel) are decoded once. ok: the row exists (m0 + am < m).
#include "conv_taps.wgsl"

struct GemmRow {
    m0: u32,
    am: u32,
    ak: u32,
    ok: bool,
    row: u32,
    od: u32,
    oh: u32,
    ow: u32,
}

fn gemm_row(flat: u32, g: u32, tile: u32) -> GemmRow {
    let m0 = p.m_start + tile * BM;
    let m = m0 + flat % BM;
    let at = out_position(m % p.positions);
    return GemmRow(m0, flat % BM, flat / BM, m < p.m, (m / p.positions) * p.c_in + g * p.c_in_g, at.x, at.y,
                   at.z);
}

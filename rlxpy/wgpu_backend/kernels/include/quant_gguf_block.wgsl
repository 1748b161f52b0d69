// Which x rows a GGUF GEMV workgroup takes (quant_gguf_gemv and quant_gguf_rows): in grouped (MoE)
// mode grid y/z is one x row, whose weights are its expert's slab (an expert out of range gives a
// zero row: valid = false); otherwise grid y walks blocks of MR x rows, each block reading W once.
// Needs MR, GROUPED, expert_of and the params m, n, k, x, y, w, w_stride.
struct XBlock {
    rows: u32,
    x: u32,
    y: u32,
    w: u32,
    valid: bool,
    skip: bool,  // past the last row: the workgroup has nothing to do
}

fn x_block(wid: vec3<u32>) -> XBlock {
    var b = XBlock(p.m, p.x, p.y, p.w, true, false);
    if (GROUPED) {
        let batch = wid.y + wid.z * 65535u;
        if (batch >= p.m) {
            b.skip = true;
            return b;
        }
        let e = expert_of(batch);
        b.valid = e >= 0;
        b.rows = 1u;
        b.x = p.x + batch * p.k;
        b.y = p.y + batch * p.n;
        b.w = p.w + u32(max(e, 0)) * p.w_stride;
    } else if (wid.y > 0u || p.m > MR) {
        let first = wid.y * MR;
        if (first >= p.m) {
            b.skip = true;
            return b;
        }
        b.rows = min(MR, p.m - first);
        b.x = p.x + first * p.k;
        b.y = p.y + first * p.n;
    }
    return b;
}

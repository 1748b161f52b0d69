// Exact dequantised values of elements e .. e+3 (e a multiple of 4) of the row at byte rb.
fn dq4(rb: u32, e: u32) -> vec4<f32> {
    let u = e >> 5u;
    let c = (e >> 2u) & 7u;
    let q = q_chunk(rb, u, c);
    if (IS_FLOAT) {
        return q;
    }
    let sm = q_scale(rb, u, c >> 2u);
    var v = sm.x * q;
    if (HAS_MIN) {
        v = v + sm.y;
    }
    return v;
}

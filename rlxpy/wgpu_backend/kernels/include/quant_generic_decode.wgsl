// The generic group-wise schemes' shared decoding (lowering/quant_generic.py): minifloat decoders (OCP FP8
// and E2M1, exact in f32; NaN/inf codes decode to 0 like the reference), the per-column (scale, zero)
// of 4 columns, and f32 words of a column run. A scheme's codes4 / affine4 come from
// quant_generic_codes_* and quant_generic_scale_*.
#include "quant_bytes.wgsl"

fn fp8_e4m3(b: u32) -> f32 {
    let ex = (b >> 3u) & 15u;
    let mant = f32(b & 7u) * 0.125;
    var mag = select(ldexp(1.0 + mant, i32(ex) - 7), mant * 0.015625, ex == 0u);
    mag = select(mag, 0.0, (b & 0x7fu) == 0x7fu);
    return select(mag, -mag, (b & 0x80u) != 0u);
}
fn fp8_e5m2(b: u32) -> f32 {
    let ex = (b >> 2u) & 31u;
    let mant = f32(b & 3u) * 0.25;
    var mag = select(ldexp(1.0 + mant, i32(ex) - 15), mant * 6.103515625e-5, ex == 0u);
    mag = select(mag, 0.0, ex == 31u);
    return select(mag, -mag, (b & 0x80u) != 0u);
}
fn fp4_e2m1(c: u32) -> f32 {
    let ex = (c >> 1u) & 3u;
    let half = f32(c & 1u) * 0.5;
    let mag = select(ldexp(1.0 + half, i32(ex) - 1), half, ex == 0u);
    return select(mag, -mag, (c & 8u) != 0u);
}
struct Affine {
    scale: vec4<f32>,
    zero: vec4<f32>,
}
fn col_mask(col: u32) -> vec4<f32> {
    let cols = vec4<u32>(col) + vec4<u32>(0u, 1u, 2u, 3u);
    return select(vec4<f32>(1.0), vec4<f32>(0.0), cols >= vec4<u32>(p.n));
}
// f32 words at word offset base + col .. col + 3 (only those inside the row are read)
fn words4(base: u32, col: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i = i + 1u) {
        if (col + i < p.n) {
            v[i] = bitcast<f32>(buf[base + col + i]);
        }
    }
    return v;
}

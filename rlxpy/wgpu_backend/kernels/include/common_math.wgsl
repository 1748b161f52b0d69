// Math functions WGSL lacks or leaves inaccurate: erf, atan, sin/cos/tan with their own range
// reduction, and a tanh that cannot overflow (the activations of elementwise.ACTIVATION_WGSL).
#include "common_float.wgsl"

// erf via Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): exact GELU needs erf, WGSL has none.
fn erf_f32(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
               + t * (-1.453152027 + t * 1.061405429))));
    return sign(x) * (1.0 - poly * exp(-x * x));
}
// atan with ~2 ulp error on every GPU (WGSL only promises 4096 ulp; lavapipe's is off by 3e-6):
// reduce |x| to [0, tan(pi/8)] via atan(x) = pi/2 - atan(1/x) and pi/4 + atan((x-1)/(x+1)), then the
// odd polynomial of Cephes' atanf. NaN propagates through the arithmetic, atan(+-inf) = +-pi/2.
fn atan_f32(x: f32) -> f32 {
    var t = abs(x);
    var base = 0.0;
    if (t > 2.414213562373095) {
        base = 1.5707963267948966;
        t = -1.0 / t;
    } else if (t > 0.4142135623730950) {
        base = 0.7853981633974483;
        t = (t - 1.0) / (t + 1.0);
    }
    let z = t * t;
    let poly = (((0.0805374449538 * z - 0.138776856032) * z + 0.199777106478) * z - 0.333329491539) * z;
    let magnitude = base + (t + t * poly);
    return select(magnitude, -magnitude, (bitcast<u32>(x) & 0x80000000u) != 0u);  // atan(-0) = -0
}
// sin/cos/tan with their own range reduction: GPU built-ins are only accurate on [-pi, pi] (an
// H100 gives sin(100) = 0). |x| = k pi/2 + r, |r| <= pi/4, with pi/2 split in three parts
// (Cody-Waite) so k * part stays exact for |x| < 8192, as in Cephes' sinf; then Cephes' minimax
// polynomials on r (~1 ulp). NaN and +-inf give NaN through the arithmetic.
fn sincos_f32(x: f32) -> vec2<f32> {
    let ax = abs(x);
    let k = round(ax * 0.63661977236758134);
    let r = ((ax - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.54978995489188216e-8;
    let z = r * r;
    let s = r + r * z * ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1);
    let c = 1.0 - 0.5 * z + z * z * ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z
                                     + 4.166664568298827e-2);
    let quadrant = u32(k) & 3u;
    var sc = vec2<f32>(s, c);
    if (quadrant == 1u) {
        sc = vec2<f32>(c, -s);
    } else if (quadrant == 2u) {
        sc = vec2<f32>(-s, -c);
    } else if (quadrant == 3u) {
        sc = vec2<f32>(-c, s);
    }
    let negative = (bitcast<u32>(x) & 0x80000000u) != 0u;  // sin is odd, cos even
    return vec2<f32>(select(sc.x, -sc.x, negative), sc.y);
}
fn sin_f32(x: f32) -> f32 { return sincos_f32(x).x; }
fn cos_f32(x: f32) -> f32 { return sincos_f32(x).y; }
fn tan_f32(x: f32) -> f32 {
    let sc = sincos_f32(x);
    return sc.x / sc.y;
}
// tanh with its argument clamped so exp() cannot overflow into inf/inf; NaN still propagates.
fn tanh_safe(x: f32) -> f32 { return select(tanh(clamp(x, -15.0, 15.0)), x, is_nan(x)); }

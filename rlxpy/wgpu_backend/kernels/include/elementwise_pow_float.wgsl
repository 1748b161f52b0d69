// pow with C99 / numpy / torch.pow answers where WGSL's pow (exp2(y * log2(x))) is undefined or
// wrong: x <= 0, y == 0, x == 1 with y NaN or inf, |x| == 1 with y = +-inf, and +-0 / -inf bases.
#include "common_float.wgsl"

fn pow_f32(x: f32, y: f32) -> f32 {
    if (y == 0.0 || x == 1.0) {
        return 1.0;
    }
    if (is_nan(x) || is_nan(y)) {
        return nan_f32();
    }
    let ax = abs(x);
    if (abs(y) == inf_f32()) {
        if (ax == 1.0) {
            return 1.0;
        }
        return select(0.0, inf_f32(), (ax > 1.0) == (y > 0.0));
    }
    let negative = (bitcast<u32>(x) & 0x80000000u) != 0u;  // includes -0.0
    let integral = floor(y) == y;
    if (negative && !integral && ax != 0.0 && ax != inf_f32()) {
        return nan_f32();
    }
    var magnitude: f32;
    if (ax == 0.0) {
        magnitude = select(0.0, inf_f32(), y < 0.0);
    } else if (ax == inf_f32()) {
        magnitude = select(0.0, inf_f32(), y > 0.0);
    } else {
        magnitude = pow(ax, y);
    }
    // |y| >= 2^24 is an even integer in f32
    let odd = integral && abs(y) < 16777216.0 && (i32(abs(y)) & 1) == 1;
    return select(magnitude, -magnitude, negative && odd);
}

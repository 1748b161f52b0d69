// 1 / sqrt(v) with the reference's edge values spelled out (WGSL leaves sqrt of a negative and 1 / 0
// to the implementation): v < 0 or NaN -> NaN, v = 0 -> +inf.
#include "common_float.wgsl"

fn inv_std(v: f32) -> f32 {
    if (is_nan(v) || v < 0.0) {
        return nan_f32();
    }
    if (v == 0.0) {
        return inf_f32();
    }
    return 1.0 / sqrt(v);
}

// combine(a, b) of the reductions (reduce_serial, reduce_tile, reduce_tree): {{COMBINE}}, whose
// identity {{IDENTITY}} starts every fold (lowering/reduce.py); max and min propagate NaN.
#include "common_float.wgsl"

fn combine(a: f32, b: f32) -> f32 {
    return {{COMBINE}};
}

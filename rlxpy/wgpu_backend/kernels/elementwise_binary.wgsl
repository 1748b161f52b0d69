// y[i] = a[i] op b[i] on equal-length operands (broadcasting was made explicit by unfuse).
// One invocation per element; operands of any word dtype are converted to the compute type T.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseBinaryParams (element offsets in the window).
#include "common_arena.wgsl"
#include "common_float.wgsl"
#include "elementwise_operands.wgsl"
#include "elementwise_pow_{{POW}}.wgsl"

fn binary_op(a: T, b: T) -> T {
    return {{EXPR}};
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    {{STORE}}(p.y + i, binary_op(operand_a(i), operand_b(i)));
}

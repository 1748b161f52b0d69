// y[i] = c[i] != 0 ? a[i] : b[i] on equal-length operands (the condition of any word dtype; NaN is true).
// One invocation per element.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseWhereParams (element offsets in the window).
#include "common_arena.wgsl"
#include "elementwise_operands.wgsl"

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let keep = (buf[p.c + i] & {{COND_MASK}}) != 0u;
    {{STORE}}(p.y + i, select(operand_b(i), operand_a(i), keep));
}

// y[i] = (a[i] cmp b[i]) ? 1u : 0u, operands converted to the compute type T.
// One invocation per element; NaN compares false except for !=, as IEEE and torch.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseCompareParams (element offsets in the window).
#include "common_arena.wgsl"
#include "common_float.wgsl"
#include "elementwise_operands.wgsl"

// Mixed i32 / u32 compares (no common 32-bit type) load these ordering keys (0 for a negative i32,
// else 1; then the bits), so -1 < 4294967295 as numpy's int64 promotion has it, and test order(a, b).
fn key_i32(i: u32) -> vec2<u32> { return vec2<u32>(select(1u, 0u, bitcast<i32>(buf[i]) < 0), buf[i]); }
fn key_u32(i: u32) -> vec2<u32> { return vec2<u32>(1u, buf[i]); }
fn order(a: vec2<u32>, b: vec2<u32>) -> i32 {
    if (a.x != b.x) {
        return select(1, -1, a.x < b.x);
    }
    if (a.y != b.y) {
        return select(1, -1, a.y < b.y);
    }
    return 0;
}

fn holds(a: T, b: T) -> bool {
    return {{EXPR}};
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    buf[p.y + i] = select(0u, 1u, holds(operand_a(i), operand_b(i)));
}

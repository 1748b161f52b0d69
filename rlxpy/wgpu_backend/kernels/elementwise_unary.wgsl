// y[i] = act(x[i]) for one activation (the expression is filled in per use), f32 only.
// One invocation per element; 1-D grid folded into y past 65535 workgroups.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseUnaryParams (element offsets in the window).
#include "common_arena.wgsl"
#include "common_math.wgsl"
#include "elementwise_map.wgsl"

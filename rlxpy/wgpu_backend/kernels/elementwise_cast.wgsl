// y[i] = cast(x[i]) between word dtypes: float -> int truncates toward zero, saturates, NaN -> 0;
// anything -> bool is (x != 0). One invocation per element.
// Bindings: 0 = arena window (u32 words), 1 = ElementwiseCastParams (element offsets in the window).
#include "common_arena.wgsl"
#include "common_float.wgsl"
#include "elementwise_map.wgsl"

// y[i] = cast(x[i]) between word dtypes like elementwise_cast, 4 elements per invocation through
// 16-byte loads and stores, where the element count and offsets are multiples of 4 (p.n counts
// vec4s, the offsets words). Each word is reinterpreted as {{TX}}, converted ({{CONVERT}}, an
// expression of v) to {{TY}} and stored as its bits.
#include "common_arena_vec4.wgsl"
#include "common_float.wgsl"
#include "common_entry_items.wgsl"

fn convert(v: {{TX}}) -> {{TY}} {
    return {{CONVERT}};
}

fn cast_word(w: u32) -> u32 {
    return bitcast<u32>(convert(bitcast<{{TX}}>(w)));
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let w = buf[(p.x >> 2u) + i];
    buf[(p.y >> 2u) + i] = vec4<u32>(cast_word(w.x), cast_word(w.y), cast_word(w.z), cast_word(w.w));
}

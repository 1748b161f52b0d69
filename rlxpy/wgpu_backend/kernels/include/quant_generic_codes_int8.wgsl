// codes4(e): W elements e .. e+3 as signed bytes (int8, int8_asym).
#include "quant_generic_decode.wgsl"

fn codes4(e: u32) -> vec4<f32> {
    let w = ld_word(p.w + e);
    return sbytes4(w);
}

// f16 / bf16 bits (the low 16 bits of h) -> f32, exactly: every half is an f32. The IEEE half by bit
// surgery, subnormals included (unpack2x16float may flush them), as torch's
// c10::detail::fp16_ieee_to_fp32_value and gguf-py read them.
fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let ex = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    if (ex == 0u) {
        return bitcast<f32>(bitcast<u32>(f32(man) * 5.9604644775390625e-8) | sign);
    }
    if (ex == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (man << 13u));
    }
    return bitcast<f32>(sign | ((ex + 112u) << 23u) | (man << 13u));
}
fn bf16_to_f32(h: u32) -> f32 { return bitcast<f32>(h << 16u); }

// f16 / bf16 bits (the low 16 bits of h) -> f32, exactly: every half is an f32. The IEEE half by bit
// surgery, subnormals included (unpack2x16float may flush them), as torch's
// c10::detail::fp16_ieee_to_fp32_value and gguf-py read them.
fn f16_to_f32(h: u32) -> f32 {
    // branch-free (the GEMM's weight fetch runs it inside a K loop that must not branch): all three
    // encodings are computed and the exponent picks one
    let sign = (h & 0x8000u) << 16u;
    let ex = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    let normal = sign | ((ex + 112u) << 23u) | (man << 13u);
    let special = sign | 0x7f800000u | (man << 13u);  // inf, NaN (payload kept)
    let subnormal = bitcast<u32>(f32(man) * 5.9604644775390625e-8) | sign;
    return bitcast<f32>(select(select(normal, special, ex == 31u), subnormal, ex == 0u));
}
// Both halves of h (low, high) -> f32, exactly: the hardware conversion for normals, inf and NaN, the
// exact product for zeros and subnormals (which a backend's unpack may flush). Fewer instructions than
// two f16_to_f32s: the GGUF scales (d and m, or d and dmin, share a word) are decoded in GEMM fetches.
fn f16x2_to_f32(h: u32) -> vec2<f32> {
    let halves = vec2<u32>(h & 0xffffu, h >> 16u);
    let tiny = (halves & vec2<u32>(0x7c00u)) == vec2<u32>(0u);
    let small = bitcast<vec2<u32>>(vec2<f32>(halves & vec2<u32>(0x3ffu)) * 5.9604644775390625e-8)
        | ((halves & vec2<u32>(0x8000u)) << vec2<u32>(16u));
    return select(unpack2x16float(h), bitcast<vec2<f32>>(small), tiny);
}
fn bf16_to_f32(h: u32) -> f32 { return bitcast<f32>(h << 16u); }

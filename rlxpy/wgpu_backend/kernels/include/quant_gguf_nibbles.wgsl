// The 32 quants of a Q4_x / Q5_x block from its four qs words (element j: low nibble of byte j, then
// high nibbles for j >= 16) and the 5th bits qh (0 for Q4), minus offset.

// the low 4 bits of qh moved to bit 4 of each byte (the 5th bit of 4 consecutive elements)
fn qh_bits(qh: u32) -> u32 {
    return ((qh & 1u) << 4u) | ((qh & 2u) << 11u) | ((qh & 4u) << 18u) | ((qh & 8u) << 25u);
}
fn nibble_unit(w0: u32, w1: u32, w2: u32, w3: u32, qh: u32, offset: vec4<f32>) -> array<vec4<f32>, 8> {
    let m = 0x0f0f0f0fu;
    return array<vec4<f32>, 8>(
        bytes4((w0 & m) | qh_bits(qh)) - offset,
        bytes4((w1 & m) | qh_bits(qh >> 4u)) - offset,
        bytes4((w2 & m) | qh_bits(qh >> 8u)) - offset,
        bytes4((w3 & m) | qh_bits(qh >> 12u)) - offset,
        bytes4(((w0 >> 4u) & m) | qh_bits(qh >> 16u)) - offset,
        bytes4(((w1 >> 4u) & m) | qh_bits(qh >> 20u)) - offset,
        bytes4(((w2 >> 4u) & m) | qh_bits(qh >> 24u)) - offset,
        bytes4(((w3 >> 4u) & m) | qh_bits(qh >> 28u)) - offset);
}

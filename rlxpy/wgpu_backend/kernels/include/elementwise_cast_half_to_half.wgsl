// elementwise_cast_half's store of elements 2t (a) and 2t+1 (b, present when has_b) to an f16 / bf16
// destination: the pair is one whole word, packed by {{PACK}} (a missing b packs 0.0).
fn store_pair(t: u32, a: f32, b: f32, has_b: bool) {
    buf[p.y + t] = {{PACK}}(a) | ({{PACK}}(b) << 16u);
}

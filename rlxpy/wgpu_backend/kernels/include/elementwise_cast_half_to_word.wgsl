// elementwise_cast_half's store of elements 2t (a) and 2t+1 (b, present when has_b) to a word
// destination: each converted to {{TY}} ({{CONVERT}}, an expression of the f32 v), stored by {{STORE}}.
fn convert(v: f32) -> {{TY}} {
    return {{CONVERT}};
}

fn store_pair(t: u32, a: f32, b: f32, has_b: bool) {
    {{STORE}}(p.y + 2u * t, convert(a));
    if (has_b) {
        {{STORE}}(p.y + 2u * t + 1u, convert(b));
    }
}

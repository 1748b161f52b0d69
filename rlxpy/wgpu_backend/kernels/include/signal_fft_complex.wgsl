// Complex numbers as vec2<f32> (re, im), and (re, im) pairs of f32 words in the arena (plan tables).
fn cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
fn conj(a: vec2<f32>) -> vec2<f32> { return vec2<f32>(a.x, -a.y); }
// multiply by -i and by +i: exact, no table value
fn mul_neg_i(a: vec2<f32>) -> vec2<f32> { return vec2<f32>(a.y, -a.x); }
fn mul_pos_i(a: vec2<f32>) -> vec2<f32> { return vec2<f32>(-a.y, a.x); }
// pair i of the (re, im) table starting at word `base`
fn pair(base: u32, i: u32) -> vec2<f32> {
    return vec2<f32>(ld_f32(base + 2u * i), ld_f32(base + 2u * i + 1u));
}

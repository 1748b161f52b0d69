// q_unit for the types whose chunks share no words: the eight chunks, one after another.
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    return array<vec4<f32>, 8>(q_chunk(rb, u, 0u), q_chunk(rb, u, 1u), q_chunk(rb, u, 2u),
                               q_chunk(rb, u, 3u), q_chunk(rb, u, 4u), q_chunk(rb, u, 5u),
                               q_chunk(rb, u, 6u), q_chunk(rb, u, 7u));
}

// The operands a[i], b[i] of the two-operand kernels (elementwise_binary, elementwise_compare,
// elementwise_where), loaded with {{LOAD_A}} / {{LOAD_B}} and converted to the compute type T.
// Needs the params fields a, b.
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

alias T = {{T}};

fn operand_a(i: u32) -> T { return T({{LOAD_A}}(p.a + i)); }
fn operand_b(i: u32) -> T { return T({{LOAD_B}}(p.b + i)); }

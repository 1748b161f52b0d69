// y[i] = convert(x[i]), one invocation per element (elementwise_unary, elementwise_cast): x is read
// with {{LOAD_X}} as {{TX}}, convert's result ({{CONVERT}}, an expression of v) is {{TY}}, stored with
// {{STORE}}. Needs the params fields n, x, y.
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

fn convert(v: {{TX}}) -> {{TY}} {
    return {{CONVERT}};
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    {{STORE}}(p.y + i, convert({{LOAD_X}}(p.x + i)));
}

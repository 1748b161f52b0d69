// AdamStepGroup, f32: AdamStep (include/optim_adam.wgsl) over up to 8 parameters per dispatch. Parameter
// k = workgroup y (offsets param_k, grad_k, m_k, v_k and n_k elements: fields param0..7 and so on; an unused
// slot has n = 0), element e = first + workgroup x * {{WG}} + lane. hyper = (lr, t, apply): with apply = 0 nothing is
// written. Workgroup (0, 0) writes the token. Bindings: 0 = arena window (u32 words), 1 = OptimAdamGroupParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "optim_adam.wgsl"

struct Slot {
    param: u32,
    grad: u32,
    m: u32,
    v: u32,
    n: u32,
}

fn slot(k: u32) -> Slot {
    switch k {
        case 0u: { return Slot(p.param0, p.grad0, p.m0, p.v0, p.n0); }
        case 1u: { return Slot(p.param1, p.grad1, p.m1, p.v1, p.n1); }
        case 2u: { return Slot(p.param2, p.grad2, p.m2, p.v2, p.n2); }
        case 3u: { return Slot(p.param3, p.grad3, p.m3, p.v3, p.n3); }
        case 4u: { return Slot(p.param4, p.grad4, p.m4, p.v4, p.n4); }
        case 5u: { return Slot(p.param5, p.grad5, p.m5, p.v5, p.n5); }
        case 6u: { return Slot(p.param6, p.grad6, p.m6, p.v6, p.n6); }
        default: { return Slot(p.param7, p.grad7, p.m7, p.v7, p.n7); }
    }
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    if (wid.x == 0u && wid.y == 0u && lane == 0u) {
        st_f32(p.token, 0.0);
    }
    let s = slot(wid.y);
    let e = p.first + wid.x * {{WG}}u + lane;
    if (e >= s.n || ld_f32(p.hyper + 2u) == 0.0) {
        return;
    }
    adam_update(s.param + e, s.grad + e, s.m + e, s.v + e);
}

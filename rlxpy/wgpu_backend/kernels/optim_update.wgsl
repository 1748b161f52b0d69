// In-place parameter updates, f32, one thread per element; hyper = (lr, t, apply) read from the arena, the
// gradient times the scale input (1 when absent). With apply = 0 nothing is written (a micro-batch).
//   MODE 0, SgdStep: g = scale grad + wd param; buf = g at t = 1, else momentum buf + (1 - dampening) g;
//            step = buf (g + momentum buf with nesterov; g without momentum); param -= lr step.
//   MODE 1, AdamStep: g = scale grad (+ wd param, Adam); AdamW: param *= 1 - lr wd; m += (1 - beta1)(g - m);
//            v = beta2 v + (1 - beta2) g^2; param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
//   MODE 2, AccumulateGrad: acc = 0 when apply, else acc + grad (param = acc).
// Bindings: 0 = arena window (u32 words), 1 = OptimUpdateParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"
#include "optim_adam.wgsl"

const MODE: u32 = {{MODE}}u;

fn run_item(e: u32) {
    let apply = ld_f32(p.hyper + 2u) != 0.0;
    if (e == 0u) {
        st_f32(p.token, 0.0);
    }
    if (e >= p.n) {
        return;
    }
    if (MODE == 2u) {
        st_f32(p.param + e, select(ld_f32(p.param + e) + ld_f32(p.grad + e), 0.0, apply));
        return;
    }
    if (!apply) {
        return;
    }
    if (MODE == 1u) {
        adam_update(p.param + e, p.grad + e, p.m + e, p.v + e);
        return;
    }
    let lr = ld_f32(p.hyper);
    let t = ld_f32(p.hyper + 1u);
    var scale = 1.0;
    if (p.has_scale == 1u) {
        scale = ld_f32(p.scale);
    }
    let w = ld_f32(p.param + e);
    var g = ld_f32(p.grad + e) * scale + p.weight_decay * w;
    if (p.has_state == 1u) {
        var buf = g;
        if (t > 1.5) {
            buf = p.momentum * ld_f32(p.m + e) + (1.0 - p.dampening) * g;
        }
        st_f32(p.m + e, buf);
        g = select(buf, g + p.momentum * buf, p.nesterov == 1u);
    }
    st_f32(p.param + e, w - lr * g);
}

// AdamStep's update of one element (optim_update MODE 1, optim_adam_group), f32, with the param, grad, m
// and v words at the given offsets: g = scale grad (+ wd param, Adam); AdamW first scales param *= 1 - lr wd;
// m += (1 - beta1)(g - m); v = beta2 v + (1 - beta2) g^2; param -= lr / (1 - beta1^t) * m /
// (sqrt(v) / sqrt(1 - beta2^t) + eps). Needs the params fields hyper, scale, has_scale, beta1, beta2, eps,
// weight_decay, decoupled.
fn adam_update(at_w: u32, at_g: u32, at_m: u32, at_v: u32) {
    let lr = ld_f32(p.hyper);
    let t = ld_f32(p.hyper + 1u);
    var scale = 1.0;
    if (p.has_scale == 1u) {
        scale = ld_f32(p.scale);
    }
    var w = ld_f32(at_w);
    var g = ld_f32(at_g) * scale;
    if (p.decoupled == 1u) {
        w = w * (1.0 - lr * p.weight_decay);
    } else {
        g = g + p.weight_decay * w;
    }
    let m_old = ld_f32(at_m);
    let m = m_old + (1.0 - p.beta1) * (g - m_old);
    let v = p.beta2 * ld_f32(at_v) + (1.0 - p.beta2) * g * g;
    let correction1 = 1.0 - pow(p.beta1, t);
    let correction2 = 1.0 - pow(p.beta2, t);
    let denom = sqrt(v) / sqrt(correction2) + p.eps;
    st_f32(at_w, w - lr / correction1 * m / denom);
    st_f32(at_m, m);
    st_f32(at_v, v);
}

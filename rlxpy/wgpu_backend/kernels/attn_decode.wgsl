// Attention for few queries (decode), f32: one query row per workgroup, its keys split across the threads.
// Workgroup = (key split, head * S_q + query, batch); thread t scores key k0 + t of each 256-key tile, then
// thread (g = t / D, d = t % D) sums p * v over keys g, g + DG, ...; split partials go to a combine pass.
// Bindings: 0 = arena window (u32 words), 1 = AttnDecodeParams.
struct AttnDecodeParams {
    s_q: u32,
    s_k: u32,
    kv_len: u32,
    group: u32,
    q: u32,
    k: u32,
    v: u32,
    o: u32,
    mask: u32,
    q_sb: u32,
    q_sh: u32,
    q_ss: u32,
    k_sb: u32,
    k_sh: u32,
    k_ss: u32,
    m_sb: u32,
    m_sh: u32,
    m_sq: u32,
    m_sk: u32,
    scale: f32,
    softcap: f32,
    window: u32,
    heads: u32,
    splits: u32,
    part: u32,
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: AttnDecodeParams;

{{PRELUDE}}

const D: u32 = {{D}}u;  // head_dim
const DG: u32 = {{DG}}u;  // key groups in the p * v phase: floor(WG / D)
const WG: u32 = {{WG}}u;  // threads = keys per tile
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

var<workgroup> qs: array<f32, {{D}}>;
var<workgroup> ps: array<f32, {{WG}}>;  // probabilities of the tile's keys
var<workgroup> red: array<f32, {{WG}}>;  // tree reductions, then the per-group partial outputs

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

fn mask_value(i: u32) -> f32 {
    return f32({{LOAD_MASK}}(i));
}

// scale, softcap, then the mask, as the reference does (ref_attention in ir/reference/nn.py)
fn masked_score(dot: f32, b: u32, h: u32, i: u32, j: u32, pos: i32) -> f32 {
    var s = dot * p.scale;
    if (p.softcap != 0.0) {
        s = p.softcap * tanh_safe(s / p.softcap);
    }
    if (MASK_KIND == 1u || MASK_KIND == 3u) {
        var keep = i32(j) <= pos;
        if (MASK_KIND == 3u) {
            keep = keep && i32(j) >= pos - i32(p.window);
        }
        s = select(-3.4e38, s, keep);
    } else if (MASK_KIND == 2u) {
        let keep = mask_value(p.mask + b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk);
        s = select(s, -1e9, keep < 0.5);
    } else if (MASK_KIND == 4u) {
        s = s + mask_value(p.mask + b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk);
    }
    return s;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let split = wid.x;
    let i = wid.y % p.s_q;
    let h = wid.y / p.s_q;
    let b = wid.z;
    let hk = h / p.group;  // GQA: query head h reads kv head h // (H / H_kv)
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    if (t < D) {
        qs[t] = ld_f32(p.q + b * p.q_sb + h * p.q_sh + i * p.q_ss + t);
    }
    // keys past kv_len (an unfilled KV cache) are never read; query i sits at kv_len - S_q + i
    let kv_total = min(p.kv_len, p.s_k);
    let chunk = (kv_total + p.splits - 1u) / p.splits;
    var k_begin = min(split * chunk, kv_total);
    var k_end = min(k_begin + chunk, kv_total);
    let pos = i32(kv_total) - i32(p.s_q) + i32(i);
    // masked keys add exactly 0 unless the row is fully masked (pos < 0): then it averages them all
    if ((MASK_KIND == 1u || MASK_KIND == 3u) && pos >= 0) {
        k_end = min(k_end, u32(pos + 1));
        if (MASK_KIND == 3u) {
            k_begin = max(k_begin, u32(max(0, pos - i32(p.window))));
        }
    }
    let g = t / D;
    let d = t % D;
    var m = neg_inf();
    var l = 0.0;
    var acc = 0.0;
    workgroupBarrier();
    for (var k0 = k_begin; k0 < k_end; k0 += WG) {
        let j = k0 + t;
        let valid = j < k_end;
        var s = neg_inf();
        if (valid) {
            let k_row = k_base + j * p.k_ss;
            var dot = 0.0;
            for (var dd = 0u; dd < D; dd++) {
                dot += qs[dd] * ld_f32(k_row + dd);
            }
            s = masked_score(dot, b, h, i, j, pos);
        }
        red[t] = s;
        workgroupBarrier();
        for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
            if (t < stride) {
                red[t] = max(red[t], red[t + stride]);
            }
            workgroupBarrier();
        }
        let m_new = max(m, red[0]);
        let alpha = exp(m - m_new);
        let pj = select(0.0, exp(s - m_new), valid);
        workgroupBarrier();
        ps[t] = pj;
        red[t] = pj;
        workgroupBarrier();
        for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
            if (t < stride) {
                red[t] += red[t + stride];
            }
            workgroupBarrier();
        }
        l = l * alpha + red[0];
        m = m_new;
        acc *= alpha;
        if (g < DG) {
            let n = min(WG, k_end - k0);
            for (var kk = g; kk < n; kk += DG) {
                acc += ps[kk] * ld_f32(v_base + (k0 + kk) * p.k_ss + d);
            }
        }
        workgroupBarrier();
    }
    red[t] = select(0.0, acc, g < DG);
    workgroupBarrier();
    if (t < D) {
        var total = 0.0;
        for (var gg = 0u; gg < DG; gg++) {
            total += red[gg * D + t];
        }
        if (p.splits == 1u) {
            st_f32(p.o + b * p.q_sb + h * p.q_sh + i * p.q_ss + t, select(total / l, 0.0, l == 0.0));
        } else {
            // partial record [acc[D], m, l] of (row, split), rescaled by the combine pass
            let rec = p.part + (((b * p.heads + h) * p.s_q + i) * p.splits + split) * (D + 2u);
            st_f32(rec + t, total);
            if (t == 0u) {
                st_f32(rec + D, m);
                st_f32(rec + D + 1u, l);
            }
        }
    }
}

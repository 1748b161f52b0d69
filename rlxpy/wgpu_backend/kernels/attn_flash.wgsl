// Flash attention, f32: out = softmax(mask(softcap(scale * q k^T))) v, online softmax over K/V tiles.
// Workgroup = (block of BQ queries, head, batch); thread t = query row t / BK, lane t % BK: one score per
// BK-key tile, output dims lane + BK*u. Bindings: 0 = arena window (u32 words), 1 = AttnFlashParams.
struct AttnFlashParams {
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
}

@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: AttnFlashParams;

{{PRELUDE}}

const D: u32 = {{D}}u;  // head_dim
const BQ: u32 = {{BQ}}u;  // queries per workgroup
const BK: u32 = {{BK}}u;  // keys per tile (= threads per query row)
const DC: u32 = {{DC}}u;  // head dims per K/V chunk held in workgroup memory
const KS: u32 = {{KS}}u;  // DC + 1: padded row stride, so lanes reading different keys hit different banks
const ACC: u32 = {{ACC}}u;  // ceil(D / BK) output dims per thread
const WG: u32 = {{WG}}u;  // BQ * BK
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

var<workgroup> qs: array<f32, {{QS_LEN}}>;  // [BQ][D] query block
var<workgroup> kv: array<f32, {{KV_LEN}}>;  // [BK][KS] chunk of the K (then V) tile
var<workgroup> ps: array<f32, {{WG}}>;  // [BQ][BK] scores, then probabilities

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
    let row = t / BK;
    let lane = t % BK;
    let h = wid.y;
    let b = wid.z;
    let hk = h / p.group;  // GQA: query head h reads kv head h // (H / H_kv)
    let q0 = wid.x * BQ;
    let i = q0 + row;
    let q_base = p.q + b * p.q_sb + h * p.q_sh;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    for (var e = t; e < BQ * D; e += WG) {
        let r = e / D;
        var x = 0.0;
        if (q0 + r < p.s_q) {
            x = ld_f32(q_base + (q0 + r) * p.q_ss + e % D);
        }
        qs[e] = x;
    }
    // keys past kv_len (an unfilled KV cache) are never read; query i sits at kv_len - S_q + i
    let kv_total = min(p.kv_len, p.s_k);
    let shift = i32(kv_total) - i32(p.s_q);
    let pos = shift + i32(i);
    var k_begin = 0u;
    var k_end = kv_total;
    if (MASK_KIND == 1u || MASK_KIND == 3u) {
        let first = shift + i32(q0);
        let last = shift + i32(min(q0 + BQ, p.s_q)) - 1;
        // keys masked for every row of the block add exactly 0, unless a row is fully masked
        // (first < 0): that row must average all keys, so the block then reads them all
        if (first >= 0) {
            k_end = min(k_end, u32(last + 1));
            if (MASK_KIND == 3u) {
                k_begin = u32(max(0, first - i32(p.window)));
            }
        }
    }
    let i_mask = min(i, p.s_q - 1u);  // padding rows past S_q read a valid mask row
    var m = neg_inf();
    var l = 0.0;
    var acc: array<f32, ACC>;
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        var dot = 0.0;
        for (var d0 = 0u; d0 < D; d0 += DC) {
            workgroupBarrier();
            for (var e = t; e < BK * DC; e += WG) {
                let r = e / DC;
                let dd = e % DC;
                var x = 0.0;
                if (k0 + r < k_end && d0 + dd < D) {
                    x = ld_f32(k_base + (k0 + r) * p.k_ss + d0 + dd);
                }
                kv[r * KS + dd] = x;
            }
            workgroupBarrier();
            let n = min(DC, D - d0);
            for (var dd = 0u; dd < n; dd++) {
                dot += qs[row * D + d0 + dd] * kv[lane * KS + dd];
            }
        }
        let j = k0 + lane;
        let valid = j < k_end;
        let s = masked_score(dot, b, h, i_mask, min(j, k_end - 1u), pos);
        ps[t] = select(neg_inf(), s, valid);
        workgroupBarrier();
        var tile_max = neg_inf();
        for (var c = 0u; c < BK; c++) {
            tile_max = max(tile_max, ps[row * BK + c]);
        }
        let m_new = max(m, tile_max);
        let alpha = exp(m - m_new);
        workgroupBarrier();
        ps[t] = select(0.0, exp(s - m_new), valid);
        workgroupBarrier();
        var tile_sum = 0.0;
        for (var c = 0u; c < BK; c++) {
            tile_sum += ps[row * BK + c];
        }
        l = l * alpha + tile_sum;
        m = m_new;
        for (var u = 0u; u < ACC; u++) {
            acc[u] *= alpha;
        }
        for (var d0 = 0u; d0 < D; d0 += DC) {
            workgroupBarrier();
            for (var e = t; e < BK * DC; e += WG) {
                let r = e / DC;
                let dd = e % DC;
                var x = 0.0;
                if (k0 + r < k_end && d0 + dd < D) {
                    x = ld_f32(v_base + (k0 + r) * p.k_ss + d0 + dd);
                }
                kv[r * KS + dd] = x;
            }
            workgroupBarrier();
            for (var u = 0u; u < ACC; u++) {
                let d = lane + BK * u;
                if (d >= d0 && d < d0 + DC && d < D) {
                    var a = acc[u];
                    for (var c = 0u; c < BK; c++) {
                        a += ps[row * BK + c] * kv[c * KS + d - d0];
                    }
                    acc[u] = a;
                }
            }
        }
    }
    if (i < p.s_q) {
        let o_base = p.o + b * p.q_sb + h * p.q_sh + i * p.q_ss;
        for (var u = 0u; u < ACC; u++) {
            let d = lane + BK * u;
            if (d < D) {
                st_f32(o_base + d, select(acc[u] / l, 0.0, l == 0.0));
            }
        }
    }
}

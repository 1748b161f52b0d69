// Attention for few queries (decode), f32: one query row per workgroup, its keys split across the threads.
// Workgroup = (key split, head * S_q + query, batch); per TK-key tile, K goes through workgroup memory and
// thread t sums key t % TK over dims t / TK + PARTS*n; then thread (g = t / D, d = t % D) sums p * v over
// keys g, g + DG, ... Split partials go to attn_combine. Bindings: 0 = arena window, 1 = AttnDecodeParams.
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
const WG: u32 = {{WG}}u;
const TK: u32 = {{TK}}u;  // keys per tile
const PARTS: u32 = WG / TK;  // threads per key in the score phase
const DC: u32 = {{DC}}u;  // head dims per K chunk in workgroup memory
const KS: u32 = DC + 1u;  // padded row stride: the TK lanes reading different keys hit different banks
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

var<workgroup> qs: array<f32, {{D}}>;
var<workgroup> kv: array<f32, {{KV_LEN}}>;  // [TK][KS] chunk of the K tile
var<workgroup> red: array<f32, {{WG}}>;  // partial dot products, then the per-group partial outputs
var<workgroup> sc: array<f32, {{TK}}>;  // the tile's scores
var<workgroup> ps: array<f32, {{TK}}>;  // the tile's probabilities

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

// element e of the [TK keys][DC dims] chunk at (k0, d0); 0 past the keys or the head dim
fn chunk_value(base: u32, k0: u32, k_end: u32, d0: u32, e: u32) -> f32 {
    let r = e / DC;
    let dd = e % DC;
    var x = 0.0;
    if (e < TK * DC && k0 + r < k_end && d0 + dd < D) {
        x = ld_f32(base + (k0 + r) * p.k_ss + d0 + dd);
    }
    return x;
}

fn store_chunk(e: u32, x: f32) {
    if (e < TK * DC) {
        kv[e / DC * KS + e % DC] = x;
    }
}

// coalesced load of one K chunk (TK * DC <= 8 * WG): all eight loads are issued before any store
fn load_chunk(t: u32, base: u32, k0: u32, k_end: u32, d0: u32) {
    let x0 = chunk_value(base, k0, k_end, d0, t);
    let x1 = chunk_value(base, k0, k_end, d0, t + WG);
    let x2 = chunk_value(base, k0, k_end, d0, t + 2u * WG);
    let x3 = chunk_value(base, k0, k_end, d0, t + 3u * WG);
    let x4 = chunk_value(base, k0, k_end, d0, t + 4u * WG);
    let x5 = chunk_value(base, k0, k_end, d0, t + 5u * WG);
    let x6 = chunk_value(base, k0, k_end, d0, t + 6u * WG);
    let x7 = chunk_value(base, k0, k_end, d0, t + 7u * WG);
    store_chunk(t, x0);
    store_chunk(t + WG, x1);
    store_chunk(t + 2u * WG, x2);
    store_chunk(t + 3u * WG, x3);
    store_chunk(t + 4u * WG, x4);
    store_chunk(t + 5u * WG, x5);
    store_chunk(t + 6u * WG, x6);
    store_chunk(t + 7u * WG, x7);
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
    let key = t % TK;
    let part = t / TK;
    let g = t / D;
    let d = t % D;
    var m = neg_inf();
    var l = 0.0;
    var acc = 0.0;
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        var partial = 0.0;
        for (var d0 = 0u; d0 < D; d0 += DC) {
            workgroupBarrier();
            load_chunk(t, k_base, k0, k_end, d0);
            workgroupBarrier();
            for (var dd = part; dd < min(DC, D - d0); dd += PARTS) {
                partial += qs[d0 + dd] * kv[key * KS + dd];
            }
        }
        red[t] = partial;
        workgroupBarrier();
        let j = k0 + t;
        let valid = t < TK && j < k_end;
        var s = neg_inf();
        if (valid) {
            var dot = 0.0;
            for (var q = 0u; q < PARTS; q++) {
                dot += red[q * TK + t];
            }
            s = masked_score(dot, b, h, i, j, pos);
        }
        if (t < TK) {
            sc[t] = s;
        }
        workgroupBarrier();
        var tile_max = neg_inf();
        for (var c = 0u; c < TK; c++) {
            tile_max = max(tile_max, sc[c]);
        }
        let m_new = max(m, tile_max);
        let alpha = exp(m - m_new);
        if (t < TK) {
            ps[t] = select(0.0, exp(s - m_new), valid);
        }
        workgroupBarrier();
        var tile_sum = 0.0;
        for (var c = 0u; c < TK; c++) {
            tile_sum += ps[c];
        }
        l = l * alpha + tile_sum;
        m = m_new;
        acc *= alpha;
        if (g < DG) {
            let n = min(TK, k_end - k0);
            let v_col = v_base + k0 * p.k_ss + d;
            var kk = g;
            // four independent loads per step keep several memory requests in flight per thread
            for (; kk + 3u * DG < n; kk += 4u * DG) {
                let v0 = ld_f32(v_col + kk * p.k_ss);
                let v1 = ld_f32(v_col + (kk + DG) * p.k_ss);
                let v2 = ld_f32(v_col + (kk + 2u * DG) * p.k_ss);
                let v3 = ld_f32(v_col + (kk + 3u * DG) * p.k_ss);
                acc += ps[kk] * v0 + ps[kk + DG] * v1 + ps[kk + 2u * DG] * v2 + ps[kk + 3u * DG] * v3;
            }
            for (; kk < n; kk += DG) {
                acc += ps[kk] * ld_f32(v_col + kk * p.k_ss);
            }
        }
    }
    workgroupBarrier();
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

// Attention for few queries (decode), f32: the query rows sharing a kv head (GQA group x S_q, ROWS at a time)
// go through each K/V row together. Workgroup = (key split, kv head + H_kv * row chunk, batch); thread
// (key t % 128, rows 4(t / 128)..+3) scores one key of each 128-key tile, thread (g = t / D, d = t % D) sums
// p * v over keys g, g + DG, ... Split partials go to attn_combine. Bindings: 0 = arena, 1 = AttnDecodeParams.
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
const ROWS: u32 = {{ROWS}}u;  // query rows per workgroup: 4 or 8 (one or two vec4 lanes sets)
const RQ: u32 = ROWS / 4u;
const TK: u32 = 128u;  // keys per tile
const WG: u32 = 256u;
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

var<workgroup> qs: array<vec4<f32>, {{QS_LEN}}>;  // [D][RQ]: each vec4 holds one dim of four query rows
var<workgroup> red: array<vec4<f32>, 256>;  // [RQ][TK] reductions, then the per-group partial outputs
var<workgroup> ps: array<vec4<f32>, 256>;  // [RQ][TK] probabilities of the tile's keys

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

// head and query index of row rr of the kv head's group (rows enumerate (head in group, query))
fn row_head(hk: u32, rr: u32) -> u32 {
    return hk * p.group + rr / p.s_q;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let split = wid.x;
    let kv_heads = p.heads / p.group;
    let hk = wid.y % kv_heads;
    let r0 = (wid.y / kv_heads) * ROWS;  // first row of this workgroup's chunk
    let rows_total = p.group * p.s_q;
    let b = wid.z;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    for (var e = t; e < ROWS * D; e += WG) {
        let r = e / D;
        let d = e % D;
        let rr = r0 + r;
        var x = 0.0;
        if (rr < rows_total) {
            x = ld_f32(p.q + b * p.q_sb + row_head(hk, rr) * p.q_sh + (rr % p.s_q) * p.q_ss + d);
        }
        qs[d * RQ + r / 4u][r % 4u] = x;
    }
    // keys past kv_len (an unfilled KV cache) are never read; query i sits at kv_len - S_q + i
    let kv_total = min(p.kv_len, p.s_k);
    let shift = i32(kv_total) - i32(p.s_q);
    let chunk = (kv_total + p.splits - 1u) / p.splits;
    var k_begin = min(split * chunk, kv_total);
    var k_end = min(k_begin + chunk, kv_total);
    if (MASK_KIND == 1u || MASK_KIND == 3u) {
        var i_min = p.s_q;
        var i_max = 0u;
        for (var r = 0u; r < ROWS; r++) {
            if (r0 + r < rows_total) {
                i_min = min(i_min, (r0 + r) % p.s_q);
                i_max = max(i_max, (r0 + r) % p.s_q);
            }
        }
        // keys masked for every row add exactly 0, unless a row is fully masked (first < 0): that row
        // must average all keys, so the workgroup then reads them all
        let first = shift + i32(i_min);
        if (first >= 0) {
            k_end = min(k_end, u32(shift + i32(i_max) + 1));
            if (MASK_KIND == 3u) {
                k_begin = max(k_begin, u32(max(0, first - i32(p.window))));
            }
        }
    }
    let key = t % TK;
    let half = t / TK;  // score phase: rows 4 * half .. 4 * half + 3
    let g = t / D;
    let d = t % D;
    var m_lo = vec4<f32>(neg_inf());
    var m_hi = vec4<f32>(neg_inf());
    var l_lo = vec4<f32>(0.0);
    var l_hi = vec4<f32>(0.0);
    var acc_lo = vec4<f32>(0.0);
    var acc_hi = vec4<f32>(0.0);
    workgroupBarrier();
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        let j = k0 + key;
        let valid = j < k_end && half < RQ;
        var s4 = vec4<f32>(neg_inf());
        if (valid) {
            let k_row = k_base + j * p.k_ss;
            var dot = vec4<f32>(0.0);
            var dd = 0u;
            // eight independent loads per step keep several memory requests in flight per thread
            for (; dd + 8u <= D; dd += 8u) {
                let x0 = ld_f32(k_row + dd);
                let x1 = ld_f32(k_row + dd + 1u);
                let x2 = ld_f32(k_row + dd + 2u);
                let x3 = ld_f32(k_row + dd + 3u);
                let x4 = ld_f32(k_row + dd + 4u);
                let x5 = ld_f32(k_row + dd + 5u);
                let x6 = ld_f32(k_row + dd + 6u);
                let x7 = ld_f32(k_row + dd + 7u);
                dot += qs[dd * RQ + half] * x0 + qs[(dd + 1u) * RQ + half] * x1
                    + qs[(dd + 2u) * RQ + half] * x2 + qs[(dd + 3u) * RQ + half] * x3
                    + qs[(dd + 4u) * RQ + half] * x4 + qs[(dd + 5u) * RQ + half] * x5
                    + qs[(dd + 6u) * RQ + half] * x6 + qs[(dd + 7u) * RQ + half] * x7;
            }
            for (; dd < D; dd++) {
                dot += qs[dd * RQ + half] * ld_f32(k_row + dd);
            }
            for (var c = 0u; c < 4u; c++) {
                let rr = r0 + half * 4u + c;
                // rows past the group get score 0: finite, never written out
                var sc = 0.0;
                if (rr < rows_total) {
                    let i = rr % p.s_q;
                    sc = masked_score(dot[c], b, row_head(hk, rr), i, j, shift + i32(i));
                }
                s4[c] = sc;
            }
        }
        red[t] = s4;
        workgroupBarrier();
        for (var stride = TK / 2u; stride > 0u; stride >>= 1u) {
            if (key < stride) {
                red[t] = max(red[t], red[t + stride]);
            }
            workgroupBarrier();
        }
        let m_lo_new = max(m_lo, red[0]);
        let m_hi_new = max(m_hi, red[TK]);
        let alpha_lo = exp(m_lo - m_lo_new);
        let alpha_hi = exp(m_hi - m_hi_new);
        m_lo = m_lo_new;
        m_hi = m_hi_new;
        let p4 = select(vec4<f32>(0.0), exp(s4 - select(m_lo, m_hi, half == 1u)), valid);
        workgroupBarrier();
        ps[t] = p4;
        red[t] = p4;
        workgroupBarrier();
        for (var stride = TK / 2u; stride > 0u; stride >>= 1u) {
            if (key < stride) {
                red[t] += red[t + stride];
            }
            workgroupBarrier();
        }
        l_lo = l_lo * alpha_lo + red[0];
        l_hi = l_hi * alpha_hi + red[TK];
        acc_lo *= alpha_lo;
        acc_hi *= alpha_hi;
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
                acc_lo += ps[kk] * v0 + ps[kk + DG] * v1 + ps[kk + 2u * DG] * v2 + ps[kk + 3u * DG] * v3;
                if (ROWS == 8u) {
                    acc_hi += ps[TK + kk] * v0 + ps[TK + kk + DG] * v1 + ps[TK + kk + 2u * DG] * v2
                        + ps[TK + kk + 3u * DG] * v3;
                }
            }
            for (; kk < n; kk += DG) {
                let v0 = ld_f32(v_col + kk * p.k_ss);
                acc_lo += ps[kk] * v0;
                acc_hi += ps[TK + kk] * v0;
            }
        }
        workgroupBarrier();
    }
    // sum the DG key groups' partial outputs, four rows at a time
    red[t] = select(vec4<f32>(0.0), acc_lo, g < DG);
    workgroupBarrier();
    var total_lo = vec4<f32>(0.0);
    for (var gg = 0u; gg < DG; gg++) {
        total_lo += red[gg * D + d];
    }
    workgroupBarrier();
    red[t] = select(vec4<f32>(0.0), acc_hi, g < DG);
    workgroupBarrier();
    var total_hi = vec4<f32>(0.0);
    for (var gg = 0u; gg < DG; gg++) {
        total_hi += red[gg * D + d];
    }
    if (t < D) {
        for (var r = 0u; r < ROWS; r++) {
            let rr = r0 + r;
            if (rr < rows_total) {
                let h = row_head(hk, rr);
                let i = rr % p.s_q;
                let total = select(total_lo[r % 4u], total_hi[r % 4u], r >= 4u);
                let m = select(m_lo[r % 4u], m_hi[r % 4u], r >= 4u);
                let l = select(l_lo[r % 4u], l_hi[r % 4u], r >= 4u);
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
    }
}

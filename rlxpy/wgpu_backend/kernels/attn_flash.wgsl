// Flash attention, f32: out = softmax(mask(softcap(scale * q k^T))) v, online softmax over K/V tiles.
// Workgroup = (block of 64 queries, head, batch), threads 16 x 16: thread (ty, tx) owns query rows ty + 16a
// (a < 4), keys tx + 16c (c < 2) of each 32-key tile, output dims tx + 16u. Bindings: 0 = arena, 1 = params.
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
const BQ: u32 = 64u;  // queries per workgroup
const BK: u32 = 32u;  // keys per tile
const DS: u32 = 16u;  // head dims per Q/K chunk (score phase)
const DV: u32 = 32u;  // head dims per V chunk (p * v phase)
const QS: u32 = DS + 1u;  // padded row strides: lanes reading different rows hit different banks
const VS: u32 = DV + 1u;
const PS: u32 = BK + 1u;
const UD: u32 = {{UD}}u;  // ceil(D / 16) output dims per thread and row
const MASK_KIND: u32 = {{MASK_KIND}}u;  // MaskKind: 0 none, 1 causal, 2 custom, 3 sliding window, 4 bias

// Q chunk [BQ][QS] then K chunk [BK][QS] during scores; V chunk [BK][VS] during p * v
var<workgroup> tiles: array<f32, 1632>;
// probabilities [BQ][PS]; before that, the per-thread row maxima [BQ][16]
var<workgroup> ps: array<f32, 2112>;

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

// element (row, col) of a rows x cols block at (row0, col0) of a tensor; 0 outside [0, rows_end) x [0, D)
fn block_value(base: u32, stride: u32, row0: u32, rows_end: u32, col0: u32, cols: u32, e: u32) -> f32 {
    let r = e / cols;
    let c = e % cols;
    var x = 0.0;
    if (row0 + r < rows_end && col0 + c < D) {
        x = ld_f32(base + (row0 + r) * stride + col0 + c);
    }
    return x;
}

// Q chunk (BQ x DS, 4 per thread) and K chunk (BK x DS, 2 per thread): all loads issued before any store
fn load_qk(t: u32, q_base: u32, q0: u32, k_base: u32, k0: u32, k_end: u32, d0: u32) {
    let q_a = block_value(q_base, p.q_ss, q0, p.s_q, d0, DS, t);
    let q_b = block_value(q_base, p.q_ss, q0, p.s_q, d0, DS, t + 256u);
    let q_c = block_value(q_base, p.q_ss, q0, p.s_q, d0, DS, t + 512u);
    let q_d = block_value(q_base, p.q_ss, q0, p.s_q, d0, DS, t + 768u);
    let k_a = block_value(k_base, p.k_ss, k0, k_end, d0, DS, t);
    let k_b = block_value(k_base, p.k_ss, k0, k_end, d0, DS, t + 256u);
    tiles[t / DS * QS + t % DS] = q_a;
    tiles[(t + 256u) / DS * QS + t % DS] = q_b;
    tiles[(t + 512u) / DS * QS + t % DS] = q_c;
    tiles[(t + 768u) / DS * QS + t % DS] = q_d;
    tiles[BQ * QS + t / DS * QS + t % DS] = k_a;
    tiles[BQ * QS + (t + 256u) / DS * QS + t % DS] = k_b;
}

// V chunk (BK x DV, 4 per thread)
fn load_v(t: u32, v_base: u32, k0: u32, k_end: u32, d0: u32) {
    let v_a = block_value(v_base, p.k_ss, k0, k_end, d0, DV, t);
    let v_b = block_value(v_base, p.k_ss, k0, k_end, d0, DV, t + 256u);
    let v_c = block_value(v_base, p.k_ss, k0, k_end, d0, DV, t + 512u);
    let v_d = block_value(v_base, p.k_ss, k0, k_end, d0, DV, t + 768u);
    tiles[t / DV * VS + t % DV] = v_a;
    tiles[(t + 256u) / DV * VS + t % DV] = v_b;
    tiles[(t + 512u) / DV * VS + t % DV] = v_c;
    tiles[(t + 768u) / DV * VS + t % DV] = v_d;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let tx = t % 16u;
    let ty = t / 16u;
    let h = wid.y;
    let b = wid.z;
    let hk = h / p.group;  // GQA: query head h reads kv head h // (H / H_kv)
    let q0 = wid.x * BQ;
    let q_base = p.q + b * p.q_sb + h * p.q_sh;
    let k_base = p.k + b * p.k_sb + hk * p.k_sh;
    let v_base = p.v + b * p.k_sb + hk * p.k_sh;
    // keys past kv_len (an unfilled KV cache) are never read; query i sits at kv_len - S_q + i
    let kv_total = min(p.kv_len, p.s_k);
    let shift = i32(kv_total) - i32(p.s_q);
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
    var m = array<f32, 4>(neg_inf(), neg_inf(), neg_inf(), neg_inf());
    var l = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    var acc: array<f32, {{ACC_LEN}}>;  // [4 rows][UD dims]
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        // explicit zeros: a declaration inside a loop is not reliably re-zeroed on every iteration
        var s = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);  // [4 rows][2 keys]
        for (var d0 = 0u; d0 < D; d0 += DS) {
            workgroupBarrier();
            load_qk(t, q_base, q0, k_base, k0, k_end, d0);
            workgroupBarrier();
            for (var dd = 0u; dd < min(DS, D - d0); dd++) {
                let k_x = tiles[BQ * QS + tx * QS + dd];
                let k_y = tiles[BQ * QS + (tx + 16u) * QS + dd];
                for (var a = 0u; a < 4u; a++) {
                    let qv = tiles[(ty + 16u * a) * QS + dd];
                    s[2u * a] += qv * k_x;
                    s[2u * a + 1u] += qv * k_y;
                }
            }
        }
        // masked scores, and each thread's maximum over its two keys, per row
        for (var a = 0u; a < 4u; a++) {
            let i = min(q0 + ty + 16u * a, p.s_q - 1u);  // padding rows past S_q read a valid mask row
            let pos = shift + i32(q0 + ty + 16u * a);
            var row_max = neg_inf();
            for (var c = 0u; c < 2u; c++) {
                let j = k0 + tx + 16u * c;
                var v = neg_inf();
                if (j < k_end) {
                    v = masked_score(s[2u * a + c], b, h, i, j, pos);
                }
                s[2u * a + c] = v;
                row_max = max(row_max, v);
            }
            ps[(ty + 16u * a) * 16u + tx] = row_max;
        }
        workgroupBarrier();
        var alpha = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
        for (var a = 0u; a < 4u; a++) {
            var tile_max = neg_inf();
            for (var x = 0u; x < 16u; x++) {
                tile_max = max(tile_max, ps[(ty + 16u * a) * 16u + x]);
            }
            let m_new = max(m[a], tile_max);
            alpha[a] = exp(m[a] - m_new);
            m[a] = m_new;
        }
        workgroupBarrier();
        for (var a = 0u; a < 4u; a++) {
            for (var c = 0u; c < 2u; c++) {
                let j = k0 + tx + 16u * c;
                ps[(ty + 16u * a) * PS + tx + 16u * c] = select(0.0, exp(s[2u * a + c] - m[a]), j < k_end);
            }
            l[a] *= alpha[a];
            for (var u = 0u; u < UD; u++) {
                acc[a * UD + u] *= alpha[a];
            }
        }
        for (var d0 = 0u; d0 < D; d0 += DV) {
            workgroupBarrier();
            load_v(t, v_base, k0, k_end, d0);
            workgroupBarrier();
            let u0 = d0 / 16u;  // this chunk holds output dims tx + 16 * (u0 + w), w < 2
            for (var kk = 0u; kk < BK; kk++) {
                let v_x = tiles[kk * VS + tx];
                let v_y = tiles[kk * VS + tx + 16u];
                for (var a = 0u; a < 4u; a++) {
                    let pv = ps[(ty + 16u * a) * PS + kk];
                    acc[a * UD + u0] += pv * v_x;
                    if (u0 + 1u < UD) {
                        acc[a * UD + u0 + 1u] += pv * v_y;
                    }
                    if (d0 == 0u) {
                        l[a] += pv;
                    }
                }
            }
        }
    }
    for (var a = 0u; a < 4u; a++) {
        let i = q0 + ty + 16u * a;
        if (i < p.s_q) {
            let o_base = p.o + b * p.q_sb + h * p.q_sh + i * p.q_ss;
            for (var u = 0u; u < UD; u++) {
                let d = tx + 16u * u;
                if (d < D) {
                    st_f32(o_base + d, select(acc[a * UD + u] / l[a], 0.0, l[a] == 0.0));
                }
            }
        }
    }
}

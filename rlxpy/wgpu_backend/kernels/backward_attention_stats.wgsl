// Row statistics of the attention backward, f32: per query row i of (batch, head), over the keys,
// m = max score, l = sum exp(s - m) and acc = sum exp(s - m) (dO_i . V_j): the softmax's normaliser and,
// once divided by l, D_i = sum_j P_ij dP_ij = dO_i . O_i. Stored unnormalised at stats + 3 * row (row =
// (b * H + h) * S_q + i) so that a long key range can run over several dispatches (key tiles [start,
// start + count) of 32 keys; a later dispatch resumes from the stored values). Workgroup = (64 queries,
// head, batch), thread (tx, ty) = query rows 4 ty + a, keys 2 tx + c of each tile (score_block). Each
// thread keeps running statistics of its own keys (no exchange per tile); the 16 threads of a row merge
// theirs at the end. GIVEN_O (the forward's output O at p.o, q's layout): D = dO_i . O_i directly, each of
// the 16 threads of a row summing every 16th quad of head dims, and acc stored as D * l, so the dO V^T
// product is skipped. Bindings: 0 = arena window, 1 = BackwardAttentionParams.
#include "common_arena.wgsl"

#include "backward_attention_tiles.wgsl"

const GIVEN_O: bool = {{GIVEN_O}};

// running (m, l, acc) of 4 rows, one vec4 each
struct Running {
    m: vec4<f32>,
    l: vec4<f32>,
    acc: vec4<f32>,
}

// the running statistics after the scores s (-inf: no key) with their dO . V products dp
fn absorb(r: Running, s: mat2x4<f32>, dp: mat2x4<f32>) -> Running {
    let none = vec4<f32>(neg_inf());
    let m_new = max(r.m, max(s[0], s[1]));
    // a row with no key yet keeps m = -inf: nothing to rescale, nothing added
    let alpha = select(exp(r.m - m_new), vec4<f32>(0.0), r.m == none);
    let e0 = select(exp(s[0] - m_new), vec4<f32>(0.0), s[0] == none);
    let e1 = select(exp(s[1] - m_new), vec4<f32>(0.0), s[1] == none);
    return Running(m_new, r.l * alpha + e0 + e1, r.acc * alpha + e0 * dp[0] + e1 * dp[1]);
}

// this thread's part of dO_i . O_i for its 4 rows (rows past s_q give 0): head dims 4 tx .. + 3, + 64, ...
fn output_dots(qb: QueryBlock, rows: vec4<u32>) -> vec4<f32> {
    let o_base = p.o + qb.b * p.q_sb + qb.h * p.q_sh;
    var dots = vec4<f32>(0.0);
    for (var d = 4u * qb.t.x; d < D; d += 64u) {
        for (var a = 0u; a < 4u; a++) {
            dots[a] += dot(row_quad(qb.o_base, p.q_ss, rows[a], p.s_q, d), row_quad(o_base, p.q_ss, rows[a], p.s_q, d));
        }
    }
    return dots;
}

// the merged statistics of row 4 ty + a over the 16 threads of the row, from sp[(ty * 4 + a) * 16 + x]
// (with GIVEN_O, acc = l times the sum of the threads' parts of dO . O, in w)
fn merge_row(at: u32) -> vec3<f32> {
    var m = neg_inf();
    for (var x = 0u; x < 16u; x++) {
        m = max(m, sp[at + x].x);
    }
    var l = 0.0;
    var acc = 0.0;
    for (var x = 0u; x < 16u; x++) {
        let part = sp[at + x];
        let w = select(exp(part.x - m), 0.0, part.x == neg_inf());
        l += part.y * w;
        acc += part.z * w;
    }
    if (GIVEN_O) {
        var dots = 0.0;
        for (var x = 0u; x < 16u; x++) {
            dots += sp[at + x].w;
        }
        acc = dots * l;
    }
    return vec3<f32>(m, l, acc);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let qb = query_block(lane, wid);
    let t = qb.t;
    let rows = qb.q0 + 4u * t.y + vec4<u32>(0u, 1u, 2u, 3u);
    let i = min(rows, vec4<u32>(p.s_q - 1u));
    let stat = 3u * (qb.first_row + i);
    var run = Running(vec4<f32>(neg_inf()), vec4<f32>(0.0), vec4<f32>(0.0));
    if (p.start > 0u && t.x == 0u) {  // resume from the earlier dispatches (as thread 0's keys)
        run.m = vec4<f32>(ld_f32(p.stats + stat.x), ld_f32(p.stats + stat.y), ld_f32(p.stats + stat.z),
                          ld_f32(p.stats + stat.w));
        run.l = vec4<f32>(ld_f32(p.stats + stat.x + 1u), ld_f32(p.stats + stat.y + 1u),
                          ld_f32(p.stats + stat.z + 1u), ld_f32(p.stats + stat.w + 1u));
        run.acc = vec4<f32>(ld_f32(p.stats + stat.x + 2u), ld_f32(p.stats + stat.y + 2u),
                            ld_f32(p.stats + stat.z + 2u), ld_f32(p.stats + stat.w + 2u));
    }
    let span = block_keys(qb);
    for (var k0 = span.x; k0 < span.y; k0 += BC) {
        let dots = score_block(t, lane, qb.q_base, p.q_ss, qb.q0, p.s_q, qb.k_base, p.k_ss, k0, span.y);
        var dps = mat2x4<f32>(vec4<f32>(0.0), vec4<f32>(0.0));
        if (!GIVEN_O) {
            dps = score_block(t, lane, qb.o_base, p.q_ss, qb.q0, p.s_q, qb.v_base, p.k_ss, k0, span.y);
        }
        let j = k0 + 2u * t.x;
        let none = vec4<f32>(neg_inf());
        let s0 = score_factor4(dots[0], qb.b, qb.h, i, vec4<u32>(min(j, p.s_k - 1u)), qb.shift)[0];
        let s1 = score_factor4(dots[1], qb.b, qb.h, i, vec4<u32>(min(j + 1u, p.s_k - 1u)), qb.shift)[0];
        run = absorb(run, mat2x4<f32>(select(none, s0, vec4<bool>(j < span.y)),
                                      select(none, s1, vec4<bool>(j + 1u < span.y))), dps);
    }
    var dots = vec4<f32>(0.0);
    if (GIVEN_O) {
        dots = output_dots(qb, rows);
    }
    // merge the 16 threads of each row, rows 4 ty + a for a < 2, then a >= 2 (sp holds 512 entries)
    for (var half = 0u; half < 2u; half++) {
        workgroupBarrier();
        for (var a = 0u; a < 2u; a++) {
            let r = 2u * half + a;
            sp[(t.y * 2u + a) * 16u + t.x] = vec4<f32>(run.m[r], run.l[r], run.acc[r], dots[r]);
        }
        workgroupBarrier();
        if (t.x < 2u) {
            let r = 2u * half + t.x;
            let merged = merge_row((t.y * 2u + t.x) * 16u);
            if (rows[r] < p.s_q) {
                st_f32(p.stats + stat[r], merged.x);
                st_f32(p.stats + stat[r] + 1u, merged.y);
                st_f32(p.stats + stat[r] + 2u, merged.z);
            }
        }
    }
}

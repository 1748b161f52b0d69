// Token sampling, f32 logits -> i32 id per row: argmax (temperature 0) or softmax/top-k/top-p + Gumbel-max.
// One workgroup per row (grid folded into y past 65535); thread t reads tokens t + WG n, eight per batch.
// Bindings: 0 = arena window (u32 words), 1 = SampleRowsParams (seed from the uniforms or a u32[2] input).
// per_row: each row's temperature/top_k/top_p (f32 [rows, 3] at p.settings) and seed (u32 [rows, 2] at
// p.seed_input) come from the arena, and its Threefry counters are those of row 0 (slot-independent).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "reduce_order.wgsl"
#include "common_entry_rows.wgsl"
#include "common_workgroup_tree.wgsl"

const WG: u32 = {{WG}}u;

var<workgroup> red_f: array<f32, {{WG}}>;
var<workgroup> red_u: array<u32, {{WG}}>;
var<workgroup> red_c: array<u32, {{WG}}>;
var<workgroup> out_f: f32;
var<workgroup> out_u: u32;
var<workgroup> out_c: u32;

// The row's settings, from the uniforms or (per_row) read once by lane 0 and shared uniformly: the
// filters' loops hold barriers, so what they branch on must be workgroup-uniform.
struct RowSettings {
    greedy: u32,
    temperature: f32,
    top_k: u32,
    top_p: f32,
    filtered: u32,
    seed_lo: u32,
    seed_hi: u32,
}

var<workgroup> row_in: array<u32, 8>;  // a RowSettings as words

fn load_settings(row: u32, t: u32) -> RowSettings {
    if (p.per_row == 0u) {
        var seed = vec2<u32>(p.seed_lo, p.seed_hi);
        if (p.has_seed == 1u) {
            seed = vec2<u32>(ld_u32(p.seed_input), ld_u32(p.seed_input + 1u));
        }
        return RowSettings(p.greedy, p.temperature, p.top_k, p.top_p, p.filtered, seed.x, seed.y);
    }
    if (t == 0u) {
        let temperature = ld_f32(p.settings + 3u * row);
        let k = ld_f32(p.settings + 3u * row + 1u);
        let top_p = ld_f32(p.settings + 3u * row + 2u);
        // as the lowering does for the attributes: keeping every token is no filter
        let top_k = select(0u, u32(k), k >= 1.0 && k < f32(p.vocab));
        let filtered = u32(top_k > 0u || (top_p > 0.0 && top_p < 1.0));
        row_in = array<u32, 8>(u32(!(temperature > 0.0)), bitcast<u32>(max(temperature, 1e-6)), top_k,
                               bitcast<u32>(top_p), filtered, ld_u32(p.seed_input + 2u * row),
                               ld_u32(p.seed_input + 2u * row + 1u), 0u);
    }
    let w = workgroupUniformLoad(&row_in);
    return RowSettings(w[0], bitcast<f32>(w[1]), w[2], bitcast<f32>(w[3]), w[4], w[5], w[6]);
}

struct Best {
    value: f32,
    index: u32,
}

// the workgroup trees: BEST keeps the first (value, index) in numpy.argmax order (ranks_before), TALLY sums
const BEST: u32 = 0u;
const TALLY: u32 = 1u;

fn tree_merge(tree: u32, a: u32, b: u32) {
    if (tree == BEST) {
        if (ranks_before(red_f[b], red_u[b], red_f[a], red_u[a])) {
            red_f[a] = red_f[b];
            red_u[a] = red_u[b];
        }
        return;
    }
    red_u[a] += red_u[b];
    red_c[a] += red_c[b];
    red_f[a] += red_f[b];
}

// argmax of (value, index) pairs over the workgroup; call from uniform control flow
fn reduce_best(t: u32, value: f32, index: u32) -> Best {
    red_f[t] = value;
    red_u[t] = index;
    tree_reduce(t, BEST);
    if (t == 0u) {
        out_f = red_f[0];
        out_u = red_u[0];
    }
    return Best(workgroupUniformLoad(&out_f), workgroupUniformLoad(&out_u));
}

struct Tally {
    count: u32,
    ties: u32,
    mass: f32,
}

// sums of (count, ties, mass) over the workgroup; call from uniform control flow
fn reduce_tally(t: u32, mine: Tally) -> Tally {
    red_u[t] = mine.count;
    red_c[t] = mine.ties;
    red_f[t] = mine.mass;
    tree_reduce(t, TALLY);
    if (t == 0u) {
        out_u = red_u[0];
        out_c = red_c[0];
        out_f = red_f[0];
    }
    return Tally(workgroupUniformLoad(&out_u), workgroupUniformLoad(&out_c), workgroupUniformLoad(&out_f));
}

// order-preserving u32 key of a float (larger float -> larger key); -0 is folded onto +0 (from the
// bits: include/reduce_order.wgsl)
fn key_of(value: f32) -> u32 {
    return order_key(value);
}

fn value_of(key: u32) -> f32 {
    return bitcast<f32>(select(~key, key & 0x7fffffffu, (key & 0x80000000u) != 0u));
}

fn rotl(x: u32, r: u32) -> u32 {
    return (x << r) | (x >> (32u - r));
}

// four Threefry rounds with rotations r: x0 += x1; x1 = rotl(x1, r) ^ x0
fn mix4(x_in: vec2<u32>, r: vec4<u32>) -> vec2<u32> {
    var x = x_in;
    x.x += x.y;
    x.y = rotl(x.y, r.x) ^ x.x;
    x.x += x.y;
    x.y = rotl(x.y, r.y) ^ x.x;
    x.x += x.y;
    x.y = rotl(x.y, r.z) ^ x.x;
    x.x += x.y;
    x.y = rotl(x.y, r.w) ^ x.x;
    return x;
}

// Threefry2x32 with 20 rounds (Random123), as threefry2x32 in ir/reference/sample.py; written out so the
// key schedule stays in registers (an indexed key array would live in local memory)
fn threefry(c0: u32, c1: u32, k0: u32, k1: u32) -> vec2<u32> {
    let k2 = 0x1BD11BDAu ^ k0 ^ k1;
    let ra = vec4<u32>(13u, 15u, 26u, 6u);
    let rb = vec4<u32>(17u, 29u, 16u, 24u);
    var x = vec2<u32>(c0 + k0, c1 + k1);
    x = mix4(x, ra) + vec2<u32>(k1, k2 + 1u);
    x = mix4(x, rb) + vec2<u32>(k2, k0 + 2u);
    x = mix4(x, ra) + vec2<u32>(k0, k1 + 3u);
    x = mix4(x, rb) + vec2<u32>(k1, k2 + 4u);
    x = mix4(x, ra) + vec2<u32>(k2, k0 + 5u);
    return x;
}

// natural log to a few ulp, for normal x > 0: WGSL's log() only promises 2^-21 absolute error near 1,
// which would wreck -log(u) for u close to 1. x = m 2^e, m in [sqrt(1/2), sqrt(2)), atanh series.
fn log_accurate(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    var e = f32(i32((bits >> 23u) & 0xffu) - 126);
    var m = bitcast<f32>((bits & 0x7fffffu) | 0x3f000000u);  // [0.5, 1)
    if (m < 0.70710678) {
        m = m * 2.0;
        e = e - 1.0;
    }
    let y = (m - 1.0) / (m + 1.0);
    let y2 = y * y;
    let series = y * (2.0 + y2 * (0.6666666667 + y2 * (0.4 + y2 * (0.2857142857 + y2 * (0.2222222222
        + y2 * (0.1818181818 + y2 * 0.1538461538))))));
    return e * 0.69314718056 + series;
}

// tokens j0 + c WG (c < 8) of the row, all eight loads issued before any use (one memory round trip,
// not eight); addresses past the vocabulary are clamped, and callers skip those tokens
fn load8(base: u32, j0: u32) -> array<f32, 8> {
    let last = p.vocab - 1u;
    return array<f32, 8>(ld_f32(base + min(j0, last)), ld_f32(base + min(j0 + WG, last)),
                         ld_f32(base + min(j0 + 2u * WG, last)), ld_f32(base + min(j0 + 3u * WG, last)),
                         ld_f32(base + min(j0 + 4u * WG, last)), ld_f32(base + min(j0 + 5u * WG, last)),
                         ld_f32(base + min(j0 + 6u * WG, last)), ld_f32(base + min(j0 + 7u * WG, last)));
}

fn prob(x: f32, x_max: f32, total: f32, temperature: f32) -> f32 {
    return exp((x - x_max) / temperature) / total;
}

fn run_row(row: u32, t: u32) {
    if (row >= p.rows) {
        return;
    }
    let rs = load_settings(row, t);
    let base = p.x + row * p.vocab;
    var best = Best(bitcast<f32>(0xff800000u), 0xffffffffu);  // (-inf, no index): any token beats it
    for (var j0 = t; j0 < p.vocab; j0 += 8u * WG) {
        var xs = load8(base, j0);
        for (var c = 0u; c < 8u; c++) {
            if (j0 + c * WG < p.vocab && ranks_before(xs[c], j0 + c * WG, best.value, best.index)) {
                best = Best(xs[c], j0 + c * WG);
            }
        }
    }
    let top = reduce_best(t, best.value, best.index);
    if (rs.greedy == 1u) {
        if (t == 0u) {
            st_i32(p.y + row, i32(top.index));
        }
        return;
    }
    // the reference's softmax turns a non-finite max into NaN everywhere, and then picks token 0
    if (is_nan(top.value) || abs(top.value) == inf_f32()) {
        if (t == 0u) {
            st_i32(p.y + row, 0);
        }
        return;
    }
    if (rs.top_k == 1u) {  // only the first maximum survives the filter
        if (t == 0u) {
            st_i32(p.y + row, i32(top.index));
        }
        return;
    }
    let x_max = top.value;
    // Kept tokens = a prefix of the order (probability desc, index asc): those with key > cut, and the
    // first `keep_ties` (by index) of those with key == cut. Without filtering, cut = 0 keeps all.
    var cut = 0u;
    var last_kept = 0xffffffffu;
    if (rs.filtered == 1u) {
        var mine = 0.0;  // the softmax denominator: only the filters need probabilities
        for (var j0 = t; j0 < p.vocab; j0 += 8u * WG) {
            var xs = load8(base, j0);
            for (var c = 0u; c < 8u; c++) {
                if (j0 + c * WG < p.vocab) {
                    mine += exp((xs[c] - x_max) / rs.temperature);
                }
            }
        }
        let total = reduce_tally(t, Tally(0u, 0u, mine)).mass;
        let k_limit = select(p.vocab, rs.top_k, rs.top_k > 0u);
        let p_limit = select(2.0, rs.top_p, rs.top_p > 0.0 && rs.top_p < 1.0);
        // smallest key c whose strictly-better tokens still leave room: count < top_k and mass < top_p
        var lo = 0u;
        var hi = 0xffffffffu;
        while (lo < hi) {
            let mid = lo + (hi - lo) / 2u;
            var part = Tally(0u, 0u, 0.0);
            for (var j0 = t; j0 < p.vocab; j0 += 8u * WG) {
                var xs = load8(base, j0);
                for (var c = 0u; c < 8u; c++) {
                    if (j0 + c * WG < p.vocab && key_of(xs[c]) > mid) {
                        part.count += 1u;
                        part.mass += prob(xs[c], x_max, total, rs.temperature);
                    }
                }
            }
            let all = reduce_tally(t, part);
            if (all.count < k_limit && all.mass < p_limit) {
                hi = mid;
            } else {
                lo = mid + 1u;
            }
        }
        cut = lo;
        var part = Tally(0u, 0u, 0.0);
        for (var j0 = t; j0 < p.vocab; j0 += 8u * WG) {
            var xs = load8(base, j0);
            for (var c = 0u; c < 8u; c++) {
                let key = key_of(xs[c]);
                if (j0 + c * WG < p.vocab && key > cut) {
                    part.count += 1u;
                    part.mass += prob(xs[c], x_max, total, rs.temperature);
                } else if (j0 + c * WG < p.vocab && key == cut) {
                    part.ties += 1u;
                }
            }
        }
        let above = reduce_tally(t, part);
        // tokens equal to the cut value are kept while the count and the mass before them allow
        var keep_ties = min(above.ties, k_limit - above.count);
        let p_tie = prob(value_of(cut), x_max, total, rs.temperature);
        if (p_limit < 1.5 && p_tie > 0.0) {
            keep_ties = min(keep_ties, u32(clamp(ceil((p_limit - above.mass) / p_tie), 1.0, 4.0e9)));
        }
        if (keep_ties < above.ties) {  // the index of the last kept tie, by binary search
            var first = 0u;
            var last = p.vocab - 1u;
            while (first < last) {
                let mid = first + (last - first) / 2u;
                var part_ties = Tally(0u, 0u, 0.0);
                for (var j0 = t; j0 <= mid; j0 += 8u * WG) {
                    var xs = load8(base, j0);
                    for (var c = 0u; c < 8u; c++) {
                        part_ties.ties += u32(j0 + c * WG <= mid && key_of(xs[c]) == cut);
                    }
                }
                if (reduce_tally(t, part_ties).ties >= keep_ties) {
                    last = mid;
                } else {
                    first = mid + 1u;
                }
            }
            last_kept = first;
        }
    }
    // Gumbel-max: argmax over kept tokens of log p + g, g = -log(-log(u)), u from Threefry(row, token)
    let key = threefry(0u, 0u, rs.seed_lo, rs.seed_hi);
    let counter_row = select(row, 0u, p.per_row == 1u);
    var best_s = bitcast<f32>(0xff800000u);
    var best_j = 0xffffffffu;
    for (var j0 = t; j0 < p.vocab; j0 += 8u * WG) {
        var xs = load8(base, j0);
        for (var c = 0u; c < 8u; c++) {
            let j = j0 + c * WG;
            let x = xs[c];
            let kx = key_of(x);
            let z = (x - x_max) / rs.temperature;
            // g lies in [-4.24, 16.64] (u in [1e-30, 1 - 2^-24]) and the first maximum (z = 0) is always
            // kept, so a token with z < -21 can never win: skip its Threefry and logs (exact pruning)
            if (j < p.vocab && z > -21.0 && (kx > cut || (kx == cut && j <= last_kept))) {
                let bits = threefry(counter_row, j, key.x, key.y).x;
                let u = max(f32(bits >> 8u) * (1.0 / 16777216.0), 1e-30);
                let gumbel = -log_accurate(-log_accurate(u));
                // log p = (x - max) / T - log(sum): the constant does not move the argmax
                let score = z + gumbel;
                if (ranks_before(score, j, best_s, best_j)) {
                    best_s = score;
                    best_j = j;
                }
            }
        }
    }
    let chosen = reduce_best(t, best_s, best_j);
    if (t == 0u) {
        st_i32(p.y + row, i32(chosen.index));
    }
}

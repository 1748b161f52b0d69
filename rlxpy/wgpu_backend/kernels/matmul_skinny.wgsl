// y = act(a @ w + bias), MR rows per workgroup row (grid y = row blocks): one pass over w per block.
// Workgroup (32, WY): lane x owns output columns c, c + 1 (c = 2 * global x), lane y sums the rows
// k = y, y + WY, ... of w; the WY partial sums meet in workgroup memory. w is {{W_TYPE}}, [k, n] row-major.
// Bindings: 0 = arena window (u32 words), 1 = MatmulSkinnyParams (element offsets; w in w's own elements).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_math.wgsl"
#include "matmul_y_index.wgsl"

const MR: u32 = {{MR}}u;  // rows per block; p.m (the active extent may shrink it) bounds the last
const WY: u32 = {{WY}}u;  // a power of two

var<workgroup> part: array<vec2<f32>, {{PARTS}}>;  // [WY][32] partial sums of one row

// Elements e and e + 1 of w (w_pair is w_pair_f32 or w_pair_f16); the second is 0 when ``two`` is
// false (past the last column).
fn w_pair_f32(e: u32, two: bool) -> vec2<f32> {
    return vec2<f32>(ld_f32(e), select(0.0, ld_f32(e + 1u), two));
}

// f16 pairs through unpack2x16float (core WGSL, exact on lavapipe, no shader-f16 needed)
fn w_pair_f16(e: u32, two: bool) -> vec2<f32> {
    let word = buf[e >> 1u];
    if ((e & 1u) == 0u) {
        let v = unpack2x16float(word);
        return vec2<f32>(v.x, select(0.0, v.y, two));
    }
    let next = unpack2x16float(buf[(e >> 1u) + 1u]);  // an odd start: the pair spans two words
    return vec2<f32>(unpack2x16float(word).y, select(0.0, next.x, two));
}

fn w_pair(e: u32, two: bool) -> vec2<f32> {
    return w_pair_{{W_TYPE}}(e, two);
}

fn epilogue(v: f32) -> f32 {
    return {{EXPR}};
}

@compute @workgroup_size(32, {{WY}}, 1)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let c = (wid.x * 32u + lid.x) * 2u;
    let two = c + 1u < p.n;
    let row0 = wid.y * MR;
    var acc: array<vec2<f32>, MR>;
    if (c < p.n) {
        var k = lid.y;
        // four rows per trip: their loads are issued together, which hides memory latency
        for (; k + 3u * WY < p.k; k = k + 4u * WY) {
            let e = p.w + k * p.n + c;
            let w0 = w_pair(e, two);
            let w1 = w_pair(e + WY * p.n, two);
            let w2 = w_pair(e + 2u * WY * p.n, two);
            let w3 = w_pair(e + 3u * WY * p.n, two);
            for (var r = 0u; r < MR; r = r + 1u) {
                if (row0 + r < p.m) {
                    let i = p.a + (row0 + r) * p.k + k;
                    acc[r] = acc[r] + ld_f32(i) * w0 + ld_f32(i + WY) * w1 + ld_f32(i + 2u * WY) * w2
                             + ld_f32(i + 3u * WY) * w3;
                }
            }
        }
        for (; k < p.k; k = k + WY) {
            let w0 = w_pair(p.w + k * p.n + c, two);
            for (var r = 0u; r < MR; r = r + 1u) {
                if (row0 + r < p.m) {
                    acc[r] = acc[r] + ld_f32(p.a + (row0 + r) * p.k + k) * w0;
                }
            }
        }
    }
    let slot = lid.y * 32u + lid.x;
    for (var r = 0u; r < MR; r = r + 1u) {
        part[slot] = acc[r];
        workgroupBarrier();
        for (var s = WY / 2u; s > 0u; s = s / 2u) {
            if (lid.y < s) {
                part[slot] = part[slot] + part[slot + s * 32u];
            }
            workgroupBarrier();
        }
        // only lanes y = 0 read slots 0..31 here, and only they write them next row: no barrier needed
        let row = row0 + r;
        if (lid.y == 0u && row < p.m && c < p.n) {
            var v = part[slot];
            if (p.has_bias == 1u) {
                v = v + vec2<f32>(ld_f32(p.bias + c), select(0.0, ld_f32(p.bias + c + 1u), two));
            }
            st_f32(p.y + y_index(row, c), epilogue(v.x));
            if (two) {
                st_f32(p.y + y_index(row, c + 1u), epilogue(v.y));
            }
        }
    }
}

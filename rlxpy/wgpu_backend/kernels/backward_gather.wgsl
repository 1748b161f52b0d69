// d table of Gather: out[o, r, t] = sum over k with row(idx[k]) == r of dy[o, k, t], row() truncating and
// clamping like the forward (shape_gather), so indices outside the table add into its first or last row.
// Workgroup (row r, column block, o), numbered r fastest over a grid folded into y; {{WG}} lanes over t.
// The indices go by in chunks of CHUNK: the lanes test CHUNK / {{WG}} each and mark the ones that pick row r
// in a bit mask (atomicOr: the mask does not depend on the order), then every lane adds the marked dy
// rows of its column in index order (lowest bit first): the same sums in the same order as a serial
// walk over k, deterministic, with one loop turn per mask word and per match instead of per index.
// Indices [start, start + count) per dispatch; a dispatch after the first adds to what is there.
// Bindings: 0 = arena window (u32 words), 1 = BackwardGatherParams.
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "shape_gather_rows.wgsl"

const WG: u32 = {{WG}}u;
const CHUNK: u32 = 4u * WG;  // indices per chunk
const WORDS: u32 = CHUNK / 32u;

var<workgroup> marks: array<atomic<u32>, WORDS>;

@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let group = wid.x + wid.y * nwg.x;
    let r = group % p.dim;
    let t = (group / p.dim) % p.blocks * WG + lane;
    let o = group / p.dim / p.blocks;
    if (o >= p.outer) {  // the whole workgroup (past the grid's end)
        return;
    }
    let column = t < p.inner;
    let out = p.y + (o * p.dim + r) * p.inner + t;
    var acc = 0.0;
    if (column && p.accumulate == 1u) {
        acc = ld_f32(out);
    }
    let end = p.start + p.count;
    for (var c = p.start; c < end; c += CHUNK) {
        for (var w = lane; w < WORDS; w += WG) {
            atomicStore(&marks[w], 0u);
        }
        workgroupBarrier();
        for (var e = 0u; e < CHUNK / WG; e++) {
            let j = lane + e * WG;
            if (c + j < end && row_of(c + j) == r) {
                atomicOr(&marks[j / 32u], 1u << (j % 32u));
            }
        }
        workgroupBarrier();
        if (column) {
            for (var w = 0u; w < WORDS; w++) {
                var bits = atomicLoad(&marks[w]);
                while (bits != 0u) {
                    let k = c + 32u * w + firstTrailingBit(bits);
                    bits &= bits - 1u;
                    acc = acc + ld_f32(p.dy + (o * p.count_all + k) * p.inner + t);
                }
            }
        }
        workgroupBarrier();  // every lane has read the marks before the next chunk clears them
    }
    if (column) {
        st_f32(out, acc);
    }
}

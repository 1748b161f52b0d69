// Split a fused QKV row block; rotate q and k (RoPE at positions pos + row); write q to the output
// and append k, v to the KV caches at row pos + row (slot > 0: row r at position pos[r], appended to
// row r * slot + pos[r]). One thread per element of a qkv row block.
// Bindings: 0 = arena window (u32 words), 1 = RopeKvAppendParams (word offsets in the window).
#include "common_arena.wgsl"
#include "common_words.wgsl"
#include "common_entry_items.wgsl"

// Rotated value of dim d of the head whose first element is at word `head`, at table row `t`.
fn rotate(head: u32, d: u32, t: u32) -> f32 {
    let x = ld_f32(head + d);
    if (d >= p.n_rot) {
        return x;
    }
    let half = p.n_rot / 2u;
    if (p.interleaved == 1u) {  // pairs (2i, 2i+1), llama.cpp's LLAMA rope
        let i = d / 2u;
        let c = ld_f32(p.cos + t * half + i);
        let s = ld_f32(p.sin + t * half + i);
        if ((d & 1u) == 0u) {
            return x * c - ld_f32(head + d + 1u) * s;
        }
        return x * c + ld_f32(head + d - 1u) * s;
    }
    if (d < half) {  // pairs (i, i + half), transformers' rotate_half
        let c = ld_f32(p.cos + t * half + d);
        let s = ld_f32(p.sin + t * half + d);
        return x * c - ld_f32(head + d + half) * s;
    }
    let c = ld_f32(p.cos + t * half + d - half);
    let s = ld_f32(p.sin + t * half + d - half);
    return x * c + ld_f32(head + d - half) * s;
}

fn run_item(i: u32) {
    if (i >= p.n) {
        return;
    }
    let width = p.q_width + 2u * p.kv_width;
    let r = i / width;
    let c = i % width;
    // slot > 0 (batched decode): row r has its own position pos[r] and cache slot r of `slot` rows
    let position = select(buf[p.pos] + r, buf[p.pos + r], p.slot > 0u);
    let row = select(position, r * p.slot + position, p.slot > 0u);
    let t = min(position, p.max_pos - 1u);  // a kernel cannot raise: positions past the tables clamp
    let base = p.qkv + r * width;
    if (c < p.q_width) {
        let d = c % p.head_dim;
        buf[p.q_out + r * p.q_width + c] = bitcast<u32>(rotate(base + c - d, d, t));
        return;
    }
    if (row >= p.capacity || (p.slot > 0u && position >= p.slot)) {
        return;  // rows past the cache capacity are dropped, as CacheWrite does
    }
    if (c < p.q_width + p.kv_width) {
        let kc = c - p.q_width;
        let d = kc % p.head_dim;
        buf[p.k_cache + row * p.kv_width + kc] = bitcast<u32>(rotate(base + c - d, d, t));
        return;
    }
    let vc = c - p.q_width - p.kv_width;
    buf[p.v_cache + row * p.kv_width + vc] = buf[base + c];
}

// The chunked gated delta rule's shared layout (scan_gated_delta_prep writes, scan_gated_delta_chunks
// reads). Chunks are C steps; per (batch, head) bh and chunk, the scratch record at chunk_base holds
// T' [C][C] (rows t, columns s <= t), M [C][C] (the same), gamma [C] and tail [C]: see
// lowering/scan_delta_chunked.py for what they are. Needs params heads, steps, chunks, scratch.
const C: u32 = 64u;
const RECORD: u32 = 2u * C * C + 2u * C;

fn chunk_base(bh: u32, chunk: u32) -> u32 {
    return p.scratch + (bh * p.chunks + chunk) * RECORD;
}

// Index of step t of batch b, head h in a [B, S, H] tensor (times N for a [B, S, H, N] row).
fn step_index(b: u32, t: u32, h: u32) -> u32 {
    return (b * p.steps + t) * p.heads + h;
}

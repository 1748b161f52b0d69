// How many keys of batch entry b's cache are filled (the forward attention kernels): kv_len fixed
// (kv_dyn 0), or read from the position input after the S_q new rows are written (kv_dyn 1: one
// position for the batch; 2: one per batch entry), capped at S_k. Query i sits at kv_total - S_q + i.
// Needs the params fields kv_len, kv_pos, kv_dyn, s_q, s_k.
fn kv_extent(b: u32) -> u32 {
    let kv_len = select(p.kv_len, bitcast<u32>(buf[p.kv_pos + select(0u, b, p.kv_dyn == 2u)]) + p.s_q,
                        p.kv_dyn >= 1u);
    return min(kv_len, p.s_k);
}

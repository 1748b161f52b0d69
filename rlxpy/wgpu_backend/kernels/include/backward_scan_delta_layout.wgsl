// GatedDeltaNetBackward's scratch, per (batch, head) bh = b * heads + h, in u32 words of the arena:
// states[bh][slot][i][j] (slot t + 1 holds S_t, slot 0 the zero state), adj[bh][t][i][j] (dL/dS_t),
// and the per-step column values (d, r, u = dL/dr, the dbeta and dg partials) at base[bh][t][j].
fn gate_at(b: u32, t: u32, h: u32) -> u32 {
    return (b * p.steps + t) * p.heads + h;
}
fn state_at(bh: u32, slot: u32, i: u32, j: u32) -> u32 {
    return p.states + ((bh * (p.steps + 1u) + slot) * N + i) * N + j;
}
fn adj_at(bh: u32, t: u32, i: u32, j: u32) -> u32 {
    return p.adj + ((bh * p.steps + t) * N + i) * N + j;
}
fn column_at(base: u32, bh: u32, t: u32, j: u32) -> u32 {
    return base + (bh * p.steps + t) * N + j;
}

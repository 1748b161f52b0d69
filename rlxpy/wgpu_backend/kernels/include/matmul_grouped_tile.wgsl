// A grouped-matmul workgroup's tile from the routing pass's table (word 0 = the tile count, then per
// tile: expert, first position in perm, rows): grouped_tile(lane, t) returns tile t's job, zero rows
// past the count, and leaves its row ids in `rows`. The kernel declares SLOTS (>= any tile's rows)
// and fills WORD (one u32 of the arena at index i, for the arena's binding). Call it from uniform
// control flow (it has barriers); its result is uniform.
var<workgroup> rows: array<u32, SLOTS>;
var<workgroup> job: vec3<u32>;  // (expert, first position in perm, rows)

fn word(i: u32) -> u32 {
    return {{WORD}};
}

fn grouped_tile(lane: u32, t: u32) -> vec3<u32> {
    if (lane == 0u) {
        var found = vec3<u32>(0u, 0u, 0u);
        if (t < word(p.table)) {
            let entry = p.table + 1u + 3u * t;
            found = vec3<u32>(word(entry), word(entry + 1u), word(entry + 2u));
        }
        job = found;
    }
    let task = workgroupUniformLoad(&job);
    if (lane < task.z) {
        rows[lane] = word(p.perm + task.y + lane);
    }
    workgroupBarrier();
    return task;
}

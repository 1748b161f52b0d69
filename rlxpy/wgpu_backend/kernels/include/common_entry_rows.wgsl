// Entry point of the one-workgroup-per-row kernels: workgroup `row` of a grid folded into y past
// 65535 rows (LowerCtx.grid_rows) runs the kernel's run_row(row, lane) on its {{WG}} lanes; run_row
// returns at once for a row past the last (the whole workgroup: barriers stay in uniform control flow).
@compute @workgroup_size({{WG}})
fn main(@builtin(local_invocation_index) lane: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    run_row(wid.x + wid.y * nwg.x, lane);
}

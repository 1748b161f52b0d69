// Entry point of the one-invocation-per-item kernels: item i over a 1-D grid of {{WG}}-wide
// workgroups, folded into y past 65535 workgroups (LowerCtx.grid_1d). The kernel's run_item(i)
// returns at once for an i past its last item (the last workgroup has spare invocations).
@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    run_item(gid.x + gid.y * nwg.x * {{WG}}u);
}

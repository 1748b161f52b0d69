"""SelectiveScanBackward on f32: two kernels, every gradient on the GPU.

1. backward_scan_selective, one workgroup per (channel, batch) with one lane per state: the forward
   pass recomputes and stores every state h_t, then the reverse pass walks the adjoint lam_t back in
   time (in registers), storing it, writing dx and ddelta (summed over the states in workgroup memory)
   and a partial dA per (batch, channel). Each phase runs in dispatches of at most the loop budget's
   time steps, resuming from what the previous one stored.
2. backward_scan_selective_sums, one invocation per (batch, step, state) for dBm and dCm (sums over
   channels of the stored lam and h) and per (channel, state) for dA (the partials over batches).

Scratch: h and lam (S*Hd*N floats each per batch) and the dA partials (Hd*N per batch), for a group
of batches at a time: as many as fit ``SCRATCH_CAP`` (at least one), the groups one after another (the
sums kernel adds each group's dA to the previous ones'). A node whose scratch lies outside its bind
window, or is too small for one batch, runs its reference as a host step instead.
"""

from __future__ import annotations

from rlxpy.errors import GraphError, LimitError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET, chunks, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

LAYOUT = params("BackwardScanSelectiveParams", batch=U32, steps=U32, channels=U32, b0=U32, group=U32,
                start=U32, count=U32, x=U32, delta=U32, a=U32, bm=U32, cm=U32, dy=U32, out=U32, hs=U32,
                lam=U32, parts=U32)
F32_ONLY = accepts(rest=DType.F32, out=DType.F32)
BACKWARD_SCAN_SELECTIVE = kernel("backward_scan_selective", LAYOUT, dtypes=F32_ONLY, workgroup=(16, 1, 1),
                                 shared_bytes=lambda s: 8 * int(s["WG"]), sizes={"N": 16, "PHASE": 0})
BACKWARD_SCAN_SELECTIVE_SUMS = kernel("backward_scan_selective_sums", LAYOUT, dtypes=F32_ONLY,
                                      sizes={"N": 16})
FORWARD, REVERSE = 0, 1
#: Scratch bytes a node asks for: batches are processed in groups that fit (one batch at least).
SCRATCH_CAP = 64 << 20


def batch_bytes(node: Node, graph: Graph) -> int:
    """Scratch of one batch: h and lam (a float per step, channel and state each), its dA partials."""
    _, steps, channels = graph.nodes[node.inputs[0]].shape
    return 4 * node.op.state_size * channels * (2 * steps + 1)


def scan_backward_scratch(node: Node, graph: Graph) -> int:
    """The scratch of as many batches as fit SCRATCH_CAP, at least one."""
    batch = graph.nodes[node.inputs[0]].shape[0]
    per_batch = batch_bytes(node, graph)
    return per_batch * max(1, min(batch, SCRATCH_CAP // max(1, per_batch)))


def _lanes(states: int) -> int:
    """Lanes of the per-channel workgroup: the states, rounded up to a power of two for the tree."""
    return 1 << max(0, states - 1).bit_length()


@lowers(ops.SelectiveScanBackward, scratch=scan_backward_scratch)
def lower_selective_scan_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.SelectiveScanBackward = node.op  # type: ignore[assignment]
    x, delta, a, bm, cm, dy = ctx.inputs(node)
    batch, steps, channels = x.shape
    states = op.state_size
    if delta.shape != x.shape or dy.shape != x.shape or bm.shape != (batch, steps, states):
        raise GraphError(f"{where(node)}: x {x.type}, delta {delta.type}, Bm {bm.type} and dy {dy.type} "
                         "disagree")
    if node.numel == 0:
        return []
    if max(channels, batch) + 16 > LOOP_BUDGET:
        raise LimitError(f"{where(node)}: {channels} channels or {batch} batches are more than one GPU "
                         f"thread may add within the {LOOP_BUDGET} loop iterations allowed")
    base, size = ctx.scratch
    if base < ctx.window_base or base + size > ctx.window_base + ctx.window_size:
        size = 0  # the scratch area is outside this step's binding
    per_batch = batch_bytes(node, ctx.graph)
    group = min(size, scan_backward_scratch(node, ctx.graph)) // per_batch  # no more than it asked for
    if group < 1:
        return host_steps(node, ctx)  # h and lam of one batch need scratch inside this node's binding
    hs = (base - ctx.window_base) // 4
    lam = hs + group * steps * channels * states
    fields = dict(batch=batch, steps=steps, channels=channels, x=ctx.offset(x), delta=ctx.offset(delta),
                  a=ctx.offset(a), bm=ctx.offset(bm), cm=ctx.offset(cm), dy=ctx.offset(dy),
                  out=ctx.offset(node), hs=hs, lam=lam, parts=lam + group * steps * channels * states)
    return [step for b0, count in chunks(batch, group) for step in _group_steps(node, ctx, b0, count, fields)]


def _group_steps(node: Node, ctx: LowerCtx, b0: int, group: int, fields: dict[str, int]) -> list[Step]:
    """The forward and reverse dispatches of batches b0 .. b0 + group, then their sums."""
    steps, channels, states = fields["steps"], fields["channels"], node.op.state_size
    lanes = _lanes(states)
    per_dispatch = steps_per_dispatch(node, lanes.bit_length() + 2, 16, "SelectiveScanBackward")
    pieces = chunks(steps, per_dispatch)
    forward, reverse = ({"N": states, "WG": lanes, "PHASE": phase} for phase in (FORWARD, REVERSE))
    order = [(forward, piece) for piece in pieces] + [(reverse, piece) for piece in reversed(pieces)]
    fields = {**fields, "b0": b0, "group": group}
    out = [ctx.dispatch(BACKWARD_SCAN_SELECTIVE, node, (channels, group, 1), subs, False, start=start,
                        count=count, **fields)
           for subs, (start, count) in order]
    items = (group * steps + channels) * states
    out.append(ctx.dispatch(BACKWARD_SCAN_SELECTIVE_SUMS, node, ctx.grid_1d(items), {"N": states}, False,
                            start=0, count=0, **fields))
    return out

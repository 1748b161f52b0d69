"""SelectiveScanBackward on f32: two kernels, every gradient on the GPU.

1. backward_scan_selective, one workgroup per (channel, batch) with one lane per state: the forward
   pass recomputes and stores every state h_t, then the reverse pass walks the adjoint lam_t back in
   time (in registers), storing it, writing dx and ddelta (summed over the states in workgroup memory)
   and a partial dA per (batch, channel). Each phase runs in dispatches of at most the loop budget's
   time steps, resuming from what the previous one stored.
2. backward_scan_selective_sums, one invocation per (batch, step, state) for dBm and dCm (sums over
   channels of the stored lam and h) and per (channel, state) for dA (the partials over batches).

Scratch: h and lam (B*S*Hd*N floats each) and the dA partials (B*Hd*N); a node whose scratch lies
outside its bind window runs its reference as a host step instead.
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

LAYOUT = params("BackwardScanSelectiveParams", batch=U32, steps=U32, channels=U32, start=U32, count=U32,
                x=U32, delta=U32, a=U32, bm=U32, cm=U32, dy=U32, out=U32, hs=U32, lam=U32, parts=U32)
F32_ONLY = accepts(rest=DType.F32, out=DType.F32)
BACKWARD_SCAN_SELECTIVE = kernel("backward_scan_selective", LAYOUT, dtypes=F32_ONLY, workgroup=(16, 1, 1),
                                 shared_bytes=lambda s: 8 * int(s["WG"]), sizes={"N": 16, "PHASE": 0})
BACKWARD_SCAN_SELECTIVE_SUMS = kernel("backward_scan_selective_sums", LAYOUT, dtypes=F32_ONLY,
                                      sizes={"N": 16})
FORWARD, REVERSE = 0, 1


def scan_backward_scratch(node: Node, graph: Graph) -> int:
    """Bytes of h and lam (one float per batch, step, channel and state each) and the dA partials."""
    x = graph.nodes[node.inputs[0]]
    batch, steps, channels = x.shape
    states = node.op.state_size
    return 4 * states * batch * channels * (2 * steps + 1)


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
    need = scan_backward_scratch(node, ctx.graph)
    if size < need or base < ctx.window_base or base + need > ctx.window_base + ctx.window_size:
        return host_steps(node, ctx)  # h and lam need scratch inside this node's binding
    hs = (base - ctx.window_base) // 4
    lam = hs + batch * steps * channels * states
    lanes = _lanes(states)
    fields = dict(batch=batch, steps=steps, channels=channels, x=ctx.offset(x), delta=ctx.offset(delta),
                  a=ctx.offset(a), bm=ctx.offset(bm), cm=ctx.offset(cm), dy=ctx.offset(dy),
                  out=ctx.offset(node),
                  hs=hs, lam=lam, parts=lam + batch * steps * channels * states)
    per_dispatch = steps_per_dispatch(node, lanes.bit_length() + 2, 16, "SelectiveScanBackward")
    pieces = chunks(steps, per_dispatch)
    grid = (channels, batch, 1)
    forward, reverse = ({"N": states, "WG": lanes, "PHASE": phase} for phase in (FORWARD, REVERSE))
    order = [(forward, piece) for piece in pieces] + [(reverse, piece) for piece in reversed(pieces)]
    out = [ctx.dispatch(BACKWARD_SCAN_SELECTIVE, node, grid, subs, False, start=start, count=count, **fields)
           for subs, (start, count) in order]
    items = (batch * steps + channels) * states
    out.append(ctx.dispatch(BACKWARD_SCAN_SELECTIVE_SUMS, node, ctx.grid_1d(items), {"N": states}, False,
                            start=0, count=0, **fields))
    return out

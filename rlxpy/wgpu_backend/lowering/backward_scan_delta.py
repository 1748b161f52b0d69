"""GatedDeltaNetBackward on f32: every gradient on the GPU, in three kinds of dispatch.

1. backward_scan_delta (PHASE 0), one invocation per (batch, head, state column): the states S_t are
   recomputed and stored (the columns of the state evolve independently), with each step's d and r.
2. backward_scan_delta (PHASE 1), the same invocations walking the adjoint G = dL/dS_t back in time,
   storing it and the per-column values the cross-column sums need, writing dv.
3. backward_scan_delta_sums, one invocation per (batch, step, head, row i): dq and dk as sums over
   the columns, and dg and dbeta.

The first two run in dispatches of as many time steps as the loop budget allows, each resuming from
what the previous one stored (the state before its first step; the adjoint carried back). Scratch per
(batch, head): (2S + 2) N^2 + 5 S N floats; more than SCRATCH_CAP is a LimitError, and a node whose
scratch lies outside its bind window runs its reference as a host step instead.
"""

from __future__ import annotations

import math

from rlxpy.errors import LimitError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import F32, U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import chunks, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

LAYOUT = params("BackwardScanDeltaParams", batch=U32, steps=U32, heads=U32, total=U32, start=U32, count=U32,
                q=U32, k=U32, v=U32, g=U32, beta=U32, dy=U32, out=U32, states=U32, adj=U32, dvec=U32,
                rvec=U32, drvec=U32, bpart=U32, gpart=U32, carry=U32, scale=F32)
F32_ONLY = accepts(rest=DType.F32, out=DType.F32)
BACKWARD_SCAN_DELTA = kernel("backward_scan_delta", LAYOUT, dtypes=F32_ONLY, sizes={"N": 16, "PHASE": 0})
BACKWARD_SCAN_DELTA_SUMS = kernel("backward_scan_delta_sums", LAYOUT, dtypes=F32_ONLY, sizes={"N": 16})
FORWARD, REVERSE = 0, 1
#: Scratch bytes one node may ask for.
SCRATCH_CAP = 256 << 20


def delta_backward_scratch(node: Node, graph: Graph) -> int:
    batch, steps, heads, n = graph.nodes[node.inputs[0]].shape
    return 4 * batch * heads * ((2 * steps + 2) * n * n + 5 * steps * n)


@lowers(ops.GatedDeltaNetBackward, scratch=delta_backward_scratch)
def lower_gated_delta_net_backward(node: Node, ctx: LowerCtx) -> list[Step]:
    q = ctx.inputs(node)[0]
    batch, steps, heads, n = q.shape
    if node.numel == 0:
        return []
    need = delta_backward_scratch(node, ctx.graph)
    if need > SCRATCH_CAP:
        raise LimitError(f"{where(node)}: the stored states and adjoints take {need} bytes of scratch, more "
                         f"than the {SCRATCH_CAP} allowed (q {q.type})")
    base, size = ctx.scratch
    if base < ctx.window_base or base + size > ctx.window_base + ctx.window_size or size < need:
        return host_steps(node, ctx)  # the scratch must lie inside this node's binding
    words = (base - ctx.window_base) // 4
    bh = batch * heads
    layout = {}
    for name, count in (("states", (steps + 1) * n * n), ("adj", steps * n * n), ("dvec", steps * n),
                        ("rvec", steps * n), ("drvec", steps * n), ("bpart", steps * n), ("gpart", steps * n),
                        ("carry", n * n)):
        layout[name] = words
        words += bh * count
    inputs = {name: ctx.offset(t) for name, t in zip(("q", "k", "v", "g", "beta", "dy"), ctx.inputs(node))}
    fields = dict(batch=batch, steps=steps, heads=heads, total=math.prod(q.shape), out=ctx.offset(node),
                  scale=1.0 / math.sqrt(n), **inputs, **layout)
    per_dispatch = steps_per_dispatch(node, 3 * n, 2 * n + 16, "GatedDeltaNetBackward")
    pieces = chunks(steps, per_dispatch)
    order = [(FORWARD, piece) for piece in pieces] + [(REVERSE, piece) for piece in reversed(pieces)]
    grid = ctx.grid_1d(bh * n)
    out = [ctx.dispatch(BACKWARD_SCAN_DELTA, node, grid, {"N": n, "PHASE": phase}, False, start=start,
                        count=count, **fields)
           for phase, (start, count) in order]
    out.append(ctx.dispatch(BACKWARD_SCAN_DELTA_SUMS, node, ctx.grid_1d(fields["total"]), {"N": n}, False,
                            start=0, count=0, **fields))
    return out

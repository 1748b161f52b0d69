"""Argmax (and TopK with k = 1) of long rows in two dispatches: reduce_topk_split.

reduce_topk gives a row one workgroup that scans it 4 x 256 values per loop step: for a decode step's
49152 logits that is 48 dependent load round trips (~43 µs on an H100, benches/RESULTS.md). Here the
row is cut into parts of 4 x 256 values, one workgroup each (each lane's four loads issued together),
whose best (value, index) go to the arena's scratch; a second dispatch merges a row's records. Same
order as reduce_topk (include/reduce_order.wgsl): NaN largest, ties -> the smaller index, so the
first index of the maximum as torch.argmax.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.schedule import MAX_GROUPS, LowerCtx, Step

SPLIT_WG = 256
SPLIT_CHUNK = 4 * SPLIT_WG  # values per part (one round of pick_after)
#: Rows at least this long are split (shorter rows take one workgroup's scan in a few steps).
SPLIT_MIN_COLS = 8192

REDUCE_TOPK_SPLIT = kernel(
    "reduce_topk_split",
    params("ReduceTopkSplitParams", (), rows=U32, cols=U32, parts=U32, part=U32, x=U32, y=U32),
    dtypes=accepts(DType.F32, out=DType.I32), workgroup=(SPLIT_WG, 1, 1),
    shared_bytes=8 * SPLIT_WG)  # pick_value, pick_index


def _shape(node: Node, graph: Graph) -> tuple[int, int]:
    """(rows, cols) of the op's input."""
    x = graph.nodes[node.inputs[0]]
    cols = x.shape[-1] if x.shape else 1
    return (x.numel // cols if cols else 0), cols


def wants_split(node: Node, rows: int, cols: int) -> bool:
    k = 1 if isinstance(node.op, ops.Argmax) else node.op.k
    return k == 1 and cols >= SPLIT_MIN_COLS and 0 < rows <= MAX_GROUPS


def scratch_bytes(node: Node, graph: Graph) -> int:
    """The parts' records (two words each) a split Argmax / TopK(k=1) wants; 0 otherwise."""
    rows, cols = _shape(node, graph)
    return 8 * rows * math.ceil(cols / SPLIT_CHUNK) if wants_split(node, rows, cols) else 0


def split_steps(node: Node, ctx: LowerCtx, x: Node, rows: int, cols: int) -> list[Step] | None:
    """The two reduce_topk_split dispatches, or None where the row is short or the scratch does not
    fit this step's arena window (the caller then scans each row in one workgroup)."""
    if not wants_split(node, rows, cols):
        return None
    parts = math.ceil(cols / SPLIT_CHUNK)
    base, size = ctx.scratch
    if size < 8 * rows * parts or base < ctx.window_base or base + size > ctx.window_base + ctx.window_size:
        return None
    fields = dict(rows=rows, cols=cols, parts=parts, part=(base - ctx.window_base) // 4, x=ctx.offset(x),
                  y=ctx.offset(node))
    return [ctx.dispatch(REDUCE_TOPK_SPLIT, node, (parts, rows, 1), {"WG": SPLIT_WG, "MERGE": "false"},
                         scalable=False, **fields),
            ctx.dispatch(REDUCE_TOPK_SPLIT, node, (1, rows, 1), {"WG": SPLIT_WG, "MERGE": "true"},
                         scalable=False, **fields)]

"""GroupedMatMul (MoE): ``y[i] = x[i] @ w[trunc(idx[i])]`` on f32, a zero row for an expert id out of
[0, E) (NaN and +-inf included), as the reference.

Two dispatches, no host step:

1. matmul_grouped_route (one workgroup): counts each expert's rows (workgroup atomics), lays them out
   expert after expert in a permutation, and writes a table of tiles of <= 64 rows of one expert;
2. matmul_grouped: one workgroup per (64-column block, tile), a tiled GEMM of the tile's rows
   (gathered through the permutation) with their expert's weight, each weight tile read once per
   64 rows. The grid is sized for the most tiles any routing can give (ceil(M / 64) + E + 1);
   workgroups past the table's count return at once.

Scratch: the tile table and the permutation. Without room for them, with more than ``MAX_EXPERTS``
experts (the routing keeps two words per expert in workgroup memory) or a K too long for one
invocation's loop budget, the op runs as a host step.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

#: index dtypes the routing reads (include/matmul_expert_index.wgsl)
INDEX_TYPES = {DType.I32: "i32", DType.U32: "u32", DType.F32: "f32", DType.I64: "i64"}
ROUTE_LANES = 256
TILE_ROWS, TILE_COLS, TILE_K = 64, 64, 16
MAX_EXPERTS = 1024

MATMUL_GROUPED_ROUTE = kernel("matmul_grouped_route", params(
    "MatmulGroupedRouteParams", rows=U32, experts=U32, idx=U32, table=U32, perm=U32),
    dtypes=accepts(DType.F32, DType.F32, set(INDEX_TYPES), out=DType.F32), workgroup=(ROUTE_LANES, 1, 1),
    # counts and starts per bucket (experts + the out-of-range bucket), a (rows, tiles) pair per lane
    shared_bytes=lambda s: 8 * int(s["BUCKETS"]) + 8 * int(s["WG"]), sizes={"BUCKETS": 9, "BM": TILE_ROWS})
MATMUL_GROUPED = kernel("matmul_grouped", params(
    "MatmulGroupedParams", k=U32, n=U32, experts=U32, x=U32, w=U32, y=U32, table=U32, perm=U32),
    dtypes=accepts(DType.F32, DType.F32, set(INDEX_TYPES), out=DType.F32), workgroup=(16, 16, 1),
    shared_bytes=4 * (2 * TILE_K * TILE_ROWS + TILE_ROWS + 4))


def max_tiles(rows: int, experts: int) -> int:
    """Tiles the routing can give: each bucket's rows in tiles of TILE_ROWS, one partial per bucket."""
    return math.ceil(rows / TILE_ROWS) + experts + 1


def scratch_words(rows: int, experts: int) -> int:
    return 1 + 3 * max_tiles(rows, experts) + rows


def grouped_scratch(node: Node, graph: Graph) -> int:
    x, w = (graph.nodes[i] for i in node.inputs[:2])
    return 4 * scratch_words(x.shape[0], w.shape[0])


def _host_reason(node: Node, ctx: LowerCtx, rows: int, experts: int, k: int) -> str:
    """Why this node cannot run on the kernels ("" when it can)."""
    if experts > MAX_EXPERTS:
        return f"{experts} experts (the routing pass holds at most {MAX_EXPERTS})"
    if math.ceil(k / TILE_K) * (TILE_K + 2) > LOOP_BUDGET:
        return f"K = {k} exceeds one invocation's loop budget"
    base, size = ctx.scratch
    inside = ctx.window_base <= base and base + size <= ctx.window_base + ctx.window_size
    if not inside or size < 4 * scratch_words(rows, experts):
        return "no room for the routing table in this step's scratch"
    return ""


@lowers(ops.GroupedMatMul, scratch=grouped_scratch)
def lower_grouped_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    x, w, idx = ctx.inputs(node)
    rows, k = x.shape
    experts, _, n = w.shape
    if node.numel == 0:
        return []
    if _host_reason(node, ctx, rows, experts, k):
        return host_steps(node, ctx)
    table = (ctx.scratch[0] - ctx.window_base) // 4
    perm = table + 1 + 3 * max_tiles(rows, experts)
    route_subs = {"BUCKETS": experts + 1, "BM": TILE_ROWS, "INDEX": INDEX_TYPES.get(idx.dtype, "i32")}
    grid = (math.ceil(n / TILE_COLS), max_tiles(rows, experts), 1)
    return [ctx.dispatch(MATMUL_GROUPED_ROUTE, node, (1, 1, 1), route_subs, False, rows=rows, experts=experts,
                         idx=ctx.offset(idx), table=table, perm=perm),
            ctx.dispatch(MATMUL_GROUPED, node, grid, None, False, k=k, n=n, experts=experts, x=ctx.offset(x),
                         w=ctx.offset(w), y=ctx.offset(node), table=table, perm=perm)]

"""GroupedMatMul (MoE): ``y[i] = x[i] @ w[trunc(idx[i])]`` on f32, a zero row for an expert id out of
[0, E) (NaN and +-inf included), as the reference.

Two dispatches, no host step:

1. matmul_grouped_route (one workgroup): counts each expert's rows (workgroup atomics), lays them out
   expert after expert in a permutation, and writes a table of tiles of <= BM rows of one expert;
2. the GEMM over that table, one workgroup per (column block, tile); the grid is sized for the most
   tiles any routing can give (ceil(M / BM) + E + 1), workgroups past the table's count return at once.
   With 128-row tiles an expert's last part of at most 64 rows goes to a second table instead, and a
   third dispatch runs it on 64-row tiles (E + 1 tiles at most): at 8 experts x 4096 rows about one
   expert in two ends with a few rows past a multiple of 128, a tile that costs as much as a full one.

   * matmul_grouped (many rows, compute-bound): the register-tiled GEMM core
     (include/matmul_register_tiles.wgsl and matmul_core.py, matmul_tiled's: double-buffered 8- or
     16-deep K steps with register prefetch, vec4 blocks per thread, no runtime checks) on the tile's
     rows, gathered through the permutation, and their expert's weight; each weight tile is read once
     per BM rows. The tile (BM x BN): ``choose_tile``, its K plan: CORES.
   * matmul_grouped_rows (at most FEW_ROWS rows, decode: the weight read dominates): 64 columns a
     workgroup, its 256 lanes streaming the expert's weight rows in 16 k groups (4 rows in flight
     per lane, no barrier in the K loop), one register sum per tile row, the k groups added in
     workgroup memory at the end. On an H100 at 8 / 64 experts x 8 rows, K 2048: 0.16 / 0.059 ms
     (its predecessor, 64 x 64 x and w tiles staged per 16-deep K step behind a barrier: 0.43 /
     0.38 ms; reading the weights the rows touch takes ~0.1 / ~0.03 ms).

   The tiled kernels at 8 experts x 4096 rows x 2048 x 8192 on an H100: 3.43 ms, 40 TFLOP/s (TILES,
   CORES, REST_TILE); cuBLAS's per-expert products take 3.7-3.9.

   Both read the arena as vec4 words where x, w, y, K and N sit on 4-element boundaries
   (matmul_tiled's access includes), else word by word.

Scratch: the tile tables and the permutation (sized for 64-row tiles, the most tiles). Without room for
them, with more than ``MAX_EXPERTS`` experts (the routing keeps two words per expert in workgroup
memory) or a K too long for one invocation's loop budget, the op runs as a host step.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, Layout, kernel, params
from rlxpy.wgpu_backend.lowering import matmul_core
from rlxpy.wgpu_backend.lowering.reduce import LOOP_BUDGET
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

#: index dtypes the routing reads (include/matmul_expert_index.wgsl)
INDEX_TYPES = {DType.I32: "i32", DType.U32: "u32", DType.F32: "f32", DType.I64: "i64"}
ROUTE_LANES = 256
MIN_TILE_ROWS = 64  # the smallest BM: the most tiles, which the scratch is sized for
TILE_K = 8  # K per step of the register-tiled core for the tiles CORES does not list (the shallowest)
#: (BM, BN) from the largest (``choose_tile``; a 128-row tile of an expert with 64 rows would be half idle).
TILES = ((128, 128), (64, 128), (64, 64))
#: (K per step, K sum of lowering/matmul_core) by tile (K per step at most 1024 / BM and 1024 / BN: one
#: vec4 of each operand per thread and step). On an H100 (2026-11-26, benches/RESULTS.md) 8 experts x
#: 4096 rows x 2048 x 8192 took 3.53-3.55 ms at 128x128 with one running sum (cuBLAS's per-expert
#: products 3.7-4.0 ms), 4.15-4.18 at 64x128 with block sums per quadrant or per 32 of K, 4.23-4.27 at
#: 128x128 with block sums per 256-1024 of K (the second set of 64 accumulators spills), 4.58 at
#: 128x64. The price of one running sum: rms error against float64 8.1e-7 where torch f32's is 6.2e-7
#: (the quadrant sums: 2.9e-7).
CORES: dict[tuple[int, int], tuple[int, str]] = {(128, 128): (8, "none"), (64, 128): (8, "stepq"),
                                                 (64, 64): (16, "step")}
MIN_GROUPS = 256
#: The tile of the experts' last parts (<= MIN_TILE_ROWS rows) after 128-row tiles. On an H100 at 8
#: experts x 4096 rows x 2048 x 8192 (2026-11-26): 0.262 ms at 64x128, 0.288 at 64x64; the 128-row
#: tiles' dispatch 3.15 ms (3.54 with those parts in 128-row tiles of their own).
REST_TILE = (MIN_TILE_ROWS, 128)
#: the few-rows kernel: at most this many rows (each lane keeps one sum per row), 64 columns a workgroup
FEW_ROWS, ROWS_COLS = 16, 64
MAX_EXPERTS = 1024
#: Benches and tests only: force a (BM, BN) of the tiled kernel, and its (K per step, K sum). Not user
#: flags.
FORCE_TILE: tuple[int, int] | None = None
FORCE_CORE: tuple[int, str] | None = None

MATMUL_GROUPED_ROUTE = kernel("matmul_grouped_route", params(
    "MatmulGroupedRouteParams", rows=U32, experts=U32, idx=U32, table=U32, rest=U32, perm=U32),
    dtypes=accepts(DType.F32, DType.F32, set(INDEX_TYPES), out=DType.F32), workgroup=(ROUTE_LANES, 1, 1),
    # counts and starts per bucket (experts + the out-of-range bucket), (rows, tiles, tiles) per lane
    shared_bytes=lambda s: 8 * int(s["BUCKETS"]) + 16 * int(s["WG"]),
    sizes={"BUCKETS": 9, "BM": 64, "BMS": 64})


def _gemm_params(name: str) -> Layout:
    """The GEMM kernels' uniform record. m, k_len, bias, split1, split2 and block_rows are the fields
    matmul_tiled's access includes read (m = the rows of x, k_len = k, split1 = split2 = n, no bias)."""
    return params(name, k=U32, n=U32, experts=U32, x=U32, w=U32, y=U32, table=U32, perm=U32, m=U32,
                  k_len=U32, bias=U32, split1=U32, split2=U32, block_rows=U32)


_GEMM_DTYPES = accepts(DType.F32, DType.F32, set(INDEX_TYPES), out=DType.F32)
MATMUL_GROUPED = kernel(
    "matmul_grouped", _gemm_params("MatmulGroupedParams"), dtypes=_GEMM_DTYPES, workgroup=(16, 16, 1),
    # the double-buffered x and w tiles, the tile's row ids and its job
    shared_bytes=lambda s: 4 * (2 * int(s["RT_K"]) * (int(s["BM"]) + int(s["BN"])) + int(s["BM"]) + 4),
    sizes={"BM": 64, "BN": 128, "RT_K": TILE_K},
    checked=False)  # as matmul_tiled: tiles indexed in range by construction, global reads guarded
MATMUL_GROUPED_ROWS = kernel(
    "matmul_grouped_rows", _gemm_params("MatmulGroupedRowsParams"), dtypes=_GEMM_DTYPES,
    workgroup=(16, 16, 1),
    # one row's partial sums of the 16 k groups, the tile's row ids and its job
    shared_bytes=4 * (4 * 256 + MIN_TILE_ROWS + 4))


def max_tiles(rows: int, experts: int, bm: int = MIN_TILE_ROWS) -> int:
    """Tiles the routing can give: each bucket's rows in tiles of bm, one partial per bucket."""
    return math.ceil(rows / bm) + experts + 1


def scratch_words(rows: int, experts: int) -> int:
    """The first table (count + 3 words a tile), the second (one tile per bucket), the permutation."""
    return _rest_table(rows, experts) + 1 + 3 * (experts + 1) + rows


def _rest_table(rows: int, experts: int) -> int:
    """Word offset of the second tile table in the scratch."""
    return 1 + 3 * max_tiles(rows, experts)


def grouped_scratch(node: Node, graph: Graph) -> int:
    x, w = (graph.nodes[i] for i in node.inputs[:2])
    return 4 * scratch_words(x.shape[0], w.shape[0])


def few_rows(rows: int) -> bool:
    return rows <= FEW_ROWS


def choose_tile(rows: int, experts: int, n: int, storage: int = 1 << 30) -> tuple[int, int]:
    """The tiled kernel's (BM, BN): the first of TILES whose grid reaches MIN_GROUPS, whose rows the
    experts fill on average and whose workgroup memory fits ``storage`` bytes."""
    if FORCE_TILE is not None:
        return FORCE_TILE
    for bm, bn in TILES:
        filled = bm == MIN_TILE_ROWS or rows >= bm * experts
        fits = MATMUL_GROUPED.launch({"BM": bm, "BN": bn, "RT_K": core(bm, bn)[0]})[1] <= storage
        if filled and fits and math.ceil(n / bn) * max_tiles(rows, experts, bm) >= MIN_GROUPS:
            return bm, bn
    return TILES[-1]


def _loop_steps(rows: int, k: int) -> int:
    """Loop iterations one invocation of the GEMM kernel runs (lavapipe counts them)."""
    if few_rows(rows):
        return math.ceil(k / 64) + 4 * FEW_ROWS + 20  # 16 k groups x 4 rows per step; ld4/stores
    return math.ceil(k / TILE_K) + 16  # the steps (the sums and the stores are written out)


def _host_reason(node: Node, ctx: LowerCtx, rows: int, experts: int, k: int) -> str:
    """Why this node cannot run on the kernels ("" when it can)."""
    if experts > MAX_EXPERTS:
        return f"{experts} experts (the routing pass holds at most {MAX_EXPERTS})"
    if _loop_steps(rows, k) > LOOP_BUDGET:
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
    rest = table + _rest_table(rows, experts)
    perm = table + scratch_words(rows, experts) - rows
    offsets = {"x": ctx.offset(x), "w": ctx.offset(w), "y": ctx.offset(node)}
    vec4 = all(v % 4 == 0 for v in (k, n, *offsets.values()))
    subs: dict[str, object] = {"ACCESS": "vec4" if vec4 else "words",
                               "WORD": "buf[i >> 2u][i & 3u]" if vec4 else "buf[i]"}
    tiles: list[tuple[int, int, dict[str, object]]] = []  # (BM, BN, placeholders) per GEMM dispatch
    if few_rows(rows):
        gemm = MATMUL_GROUPED_ROWS
        tiles.append((MIN_TILE_ROWS, ROWS_COLS, subs | few_rows_source(FEW_ROWS)))
    else:
        (bm, cols), gemm = choose_tile(rows, experts, n, ctx.facts.max_workgroup_storage), MATMUL_GROUPED
        plan = None
        if MATMUL_GROUPED.launch({"BM": bm, "BN": cols, "RT_K": core(bm, cols)[0]})[1] \
                > ctx.facts.max_workgroup_storage:  # 64x64 8 deep fits 16 KiB
            (bm, cols), plan = TILES[-1], (TILE_K, "step")
        tiles.append((bm, cols, subs | {"BM": bm, "BN": cols, **register_tiles(bm, cols, plan)}))
        if bm > MIN_TILE_ROWS:  # the last part of <= 64 rows of each expert: REST_TILE
            rest_rows, rest_cols = REST_TILE
            tiles.append((rest_rows, rest_cols, subs | {"BM": rest_rows, "BN": rest_cols,
                                                        **register_tiles(rest_rows, rest_cols)}))
    route_subs = {"BUCKETS": experts + 1, "BM": tiles[0][0], "BMS": tiles[-1][0],
                  "INDEX": INDEX_TYPES.get(idx.dtype, "i32")}
    steps = [ctx.dispatch(MATMUL_GROUPED_ROUTE, node, (1, 1, 1), route_subs, False, rows=rows,
                          experts=experts, idx=ctx.offset(idx), table=table, rest=rest, perm=perm)]
    for i, (tile_rows, cols, gemm_subs) in enumerate(tiles):
        grid = (math.ceil(n / cols), max_tiles(rows, experts, tile_rows) if i == 0 else experts + 1, 1)
        steps.append(ctx.dispatch(gemm, node, grid, gemm_subs, False, k=k, n=n, experts=experts,
                                  table=table if i == 0 else rest, perm=perm, m=rows, k_len=k, bias=0,
                                  split1=n, split2=n, block_rows=rows, **offsets))
    return steps


def core(bm: int, bn: int) -> tuple[int, str]:
    """(K per step, K sum) of a BM x BN tile: FORCE_CORE, else CORES', else TILE_K with step sums."""
    return FORCE_CORE or CORES.get((bm, bn), (TILE_K, "step"))


def register_tiles(bm: int, bn: int, plan: tuple[int, str] | None = None) -> dict[str, object]:
    """The placeholders of matmul_grouped.wgsl's core for a BM x BN tile (include/matmul_register_tiles
    and lowering/matmul_core): the accumulators, the K loop (``plan`` = (K per step, K sum); unset:
    the tile's ``core``) and the stores, written out, and the buffer sizes."""
    depth, sums = plan or core(bm, bn)
    if depth * max(bm, bn) > 1024:
        raise ValueError(f"a {bm}x{bn} tile in {depth}-deep steps moves more than one vec4 of an operand "
                         "per thread and step")
    fetch = ("va = select(vec4<f32>(), load_a(p.x, row, {k0} + s.ak), s.loads_a); "
             "vw = select(vec4<f32>(), load_w(w, {k0} + s.wk, col0 + s.wc), s.loads_w);")
    return {"RT_ACC": matmul_core.declarations(bm, bn, depth, sums),
            "RT_LOOP": matmul_core.k_loop(bm, bn, depth, sums, fetch, "rt_put({half}u, s, va, vw);",
                                          "rt_a", "rt_w", depth=2),
            "RT_STORE": matmul_core.stores(bm, bn, "put(4u * ty + {row}u, col0 + 4u * tx + {col}u, {acc});"),
            "RT_K": depth, "RT_ROWS": 2 * depth, "RT_A_COLS": bm // 4, "RT_W_COLS": bn // 4}


def few_rows_source(count: int) -> dict[str, object]:
    """matmul_grouped_rows' placeholders, written out per tile row so its sums stay in registers:
    the row ids (row m of x for a slot past the tile's rows), per 4 k the sums of the rows present,
    and per row the k groups' sum through workgroup memory and the store."""
    ids = [f"    let x{r} = select(p.m, rows[{r}], {r}u < count);" for r in range(count)]
    sums = [f"            if (count > {r}u) {{ let a = load_a(p.x, x{r}, k4); "
            f"acc[{r}] = acc[{r}] + a.x * w0 + a.y * w1 + a.z * w2 + a.w * w3; }}" for r in range(count)]
    stores = []
    for r in range(count):
        stores += [f"    if (count > {r}u) {{",
                   f"        part[lane] = acc[{r}];",
                   "        workgroupBarrier();",
                   "        if (ty == 0u && col < p.n) {",
                   "            var sum = part[tx];",
                   "            for (var g = 1u; g < 16u; g = g + 1u) {",
                   "                sum = sum + part[16u * g + tx];",
                   "            }",
                   f"            store_y(p.y, x{r}, col, sum);",
                   "        }",
                   "        workgroupBarrier();",
                   "    }"]
    return {"ROWS": count, "ROW_IDS": "\n".join(ids), "ROW_SUMS": "\n".join(sums),
            "ROW_STORES": "\n".join(stores)}

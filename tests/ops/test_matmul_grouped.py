"""GroupedMatMul (MoE) on the GPU against per-expert torch matmuls: odd shapes, every index dtype,
out-of-range / NaN / inf expert ids (zero rows), NaN rows; and a top-k gated MoE layer (softmax or
sigmoid scores, TopK, renormalised weights) whose every step runs on the GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import TOL, assert_close

import rlxpy
from rlxpy import env
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend import arena
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.lowering import matmul_grouped  # noqa: F401  (registers its scratch before a patch)
from rlxpy.wgpu_backend.schedule import SCRATCH, DeviceFacts


def experts_torch(x: np.ndarray, w: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Oracle: one torch matmul per expert over the rows routed to it; other rows stay zero."""
    xt, wt = torch.from_numpy(x).double(), torch.from_numpy(w).double()
    ids = np.trunc(np.nan_to_num(idx.astype(np.float64), nan=-1.0, posinf=-1.0, neginf=-1.0))
    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float64)
    for e in range(w.shape[0]):
        rows = torch.from_numpy(np.flatnonzero(ids == e))
        if len(rows):
            out[rows] = xt[rows] @ wt[e]
    return out.numpy()


def run_grouped(x, w, idx, dtype="i32"):
    g = rlxpy.Graph("moe")
    xn, wn, idn = g.input("x", x.shape), g.param("w", w.shape), g.input("idx", idx.shape, dtype)
    y = g.grouped_matmul(xn, wn, idn, name="y")
    g.output(y)
    exe = rlxpy.compile(g)
    exe.set_param("w", w)
    feeds = {"x": x, "idx": idx}
    kinds = [s.kernel or s.kind for s in exe.schedule.steps]
    assert kinds[0] == "matmul_grouped_route" and len(kinds) in (2, 3) and "host" not in kinds, kinds
    return exe.run(feeds)["y"], run_reference(g, feeds, {"w": w})["y"]


@pytest.mark.parametrize("rows, k, n, experts", [(1, 1, 1, 1), (5, 6, 7, 3), (130, 33, 70, 8),
                                                 (257, 48, 65, 64), (600, 20, 17, 2), (1000, 12, 388, 64),
                                                 (1000, 13, 389, 64)])
def test_grouped_matmul_matches_per_expert_torch(device, rows, k, n, experts):
    """Experts with no rows, with more rows than one 64-row tile, K and N not multiples of the tile;
    the last two have grids large enough for 128-column blocks (vec4 and word-by-word access)."""
    r = np.random.default_rng(rows)
    x = r.standard_normal((rows, k)).astype(np.float32)
    w = r.standard_normal((experts, k, n)).astype(np.float32)
    idx = r.integers(0, experts, rows).astype(np.int32)
    got, ref = run_grouped(x, w, idx)
    want = experts_torch(x, w, idx)
    assert_close(ref, want, *TOL["matmul"], "reference vs torch")
    assert_close(got, want, *TOL["matmul"], "GPU vs torch")


@pytest.mark.parametrize("tile, rows, k, n, experts", [
    (None, 16, 300, 70, 4), (None, 3, 264, 132, 5), (None, 16, 7, 129, 1), (None, 9, 1, 3, 2),
    ((128, 128), 300, 20, 130, 2), ((128, 128), 260, 16, 256, 3), ((64, 64), 70, 9, 65, 1)])
def test_each_gemm_variant_matches_per_expert_torch(device, monkeypatch, tile, rows, k, n, experts):
    """The few-rows kernel (<= 16 rows: several 16-deep K steps, N past one 64-column block, offsets
    on and off 4-element boundaries) and the tiled kernel's tiles forced (128-row tiles, several K
    steps)."""
    monkeypatch.setattr(matmul_grouped, "FORCE_TILE", tile)
    r = np.random.default_rng(rows + k)
    x = r.standard_normal((rows, k)).astype(np.float32)
    x[rows // 2, k // 2] = np.nan  # a NaN reaches its own row only
    w = r.standard_normal((experts, k, n)).astype(np.float32)
    idx = r.integers(0, experts, rows).astype(np.int32)
    idx[0] = experts  # out of range: a zero row
    got, _ = run_grouped(x, w, idx)
    want = experts_torch(x, w, idx)
    assert np.isnan(got[rows // 2]).all() and not np.isnan(np.delete(got, rows // 2, 0)).any()
    assert_close(np.nan_to_num(got), np.nan_to_num(want), *TOL["matmul"], "GPU vs torch")


def test_128_row_tiles_send_each_experts_last_64_rows_to_the_second_table(device, monkeypatch):
    """Rows per expert around multiples of 128 and 64 (0, 1, 64, 65, 128, 192, 193, 320) and
    out-of-range rows: parts of <= 64 rows run in the third dispatch's 64-row tiles, larger ones in
    128-row tiles; every row against torch."""
    monkeypatch.setattr(matmul_grouped, "FORCE_TILE", (128, 128))
    counts = [128, 192, 193, 64, 1, 0, 320, 65]
    parts = [np.full(c, e, np.int32) for e, c in enumerate(counts)]
    idx = np.concatenate(parts + [np.full(70, -1, np.int32)])
    idx = np.random.default_rng(5).permutation(idx)
    r = np.random.default_rng(6)
    x = r.standard_normal((len(idx), 36)).astype(np.float32)
    w = r.standard_normal((len(counts), 36, 140)).astype(np.float32)
    got, _ = run_grouped(x, w, idx)
    assert_close(got, experts_torch(x, w, idx), *TOL["matmul"], "GPU vs torch")
    assert not got[idx < 0].any()


@pytest.mark.parametrize("dtype", ["i32", "u32", "i64", "f32"])
def test_out_of_range_expert_ids_give_zero_rows(device, dtype):
    r = np.random.default_rng(1)
    x, w = r.standard_normal((9, 12)).astype(np.float32), r.standard_normal((4, 12, 10)).astype(np.float32)
    values = {"i32": [0, -1, 3, 4, 2, -7, 1, 1 << 30, 3], "u32": [0, 4, 3, 5, 2, 1 << 31, 1, 9, 3],
              "i64": [0, -1, 3, 1 << 32, 2, 4, 1, -(1 << 40), 3],
              "f32": [0.9, -1.0, 3.99, 4.0, -0.5, np.nan, np.inf, -np.inf, 2.5]}[dtype]
    idx = np.array(values, dtype=DType.parse(dtype).numpy)
    with np.errstate(invalid="ignore"):
        got, ref = run_grouped(x, w, idx, dtype)
    want = experts_torch(x, w, idx)
    assert_close(ref, want, *TOL["matmul"], "reference vs torch")
    assert_close(got, want, *TOL["matmul"], "GPU vs torch")
    valid = {"i32": [0, 2, 4, 6, 8], "u32": [0, 2, 4, 6, 8], "i64": [0, 2, 4, 6, 8],
             "f32": [0, 2, 4, 8]}[dtype]
    assert not got[[i for i in range(9) if i not in valid]].any(), "rows with a bad id are zero"
    assert got[valid].any(axis=1).all()


def test_nan_in_a_row_stays_in_that_row(device):
    r = np.random.default_rng(2)
    x, w = r.standard_normal((70, 8)).astype(np.float32), r.standard_normal((3, 8, 5)).astype(np.float32)
    x[10, 3] = np.nan
    idx = (np.arange(70) % 3).astype(np.int32)
    got, _ = run_grouped(x, w, idx)
    assert np.isnan(got[10]).all() and not np.isnan(np.delete(got, 10, axis=0)).any()
    assert_close(got, experts_torch(x, w, idx), *TOL["matmul"], "GPU vs torch")


def moe_layer(g: rlxpy.Graph, x, logits, w, top_k: int, scores: str):
    """Top-k gate + experts + weighted combine from existing ops: scores, TopK, per-row gather of the
    picked scores (flat index = row * E + expert), renormalise, rows repeated top_k times through the
    grouped matmul, weighted sum over the k picks."""
    rows, experts = logits.shape
    probs = g.softmax(logits) if scores == "softmax" else g.sigmoid(logits)
    picked = g.topk(probs, top_k, name="picked")  # i32 [rows, top_k]
    row_base = g.constant((np.arange(rows, dtype=np.int32) * experts)[:, None], "i32")
    flat = g.reshape(g.add(picked, row_base), [rows * top_k])
    weights = g.reshape(g.gather(g.reshape(probs, [rows * experts]), flat), [rows, top_k])
    weights = g.div(weights, g.sum(weights, [1], keep_dim=True), name="weights")
    repeated = g.gather(x, g.constant(np.arange(rows * top_k, dtype=np.int32) // top_k, "i32"))
    y = g.grouped_matmul(repeated, w, g.reshape(picked, [rows * top_k]))
    scaled = g.mul(y, g.reshape(weights, [rows * top_k, 1]))
    return g.sum(g.reshape(scaled, [rows, top_k, w.shape[2]]), [1], name="moe")


def moe_torch(x, logits, w, top_k, scores):
    xt, wt = torch.from_numpy(x).double(), torch.from_numpy(w).double()
    lt = torch.from_numpy(logits).double()
    probs = torch.softmax(lt, -1) if scores == "softmax" else torch.sigmoid(lt)
    vals, picks = torch.topk(probs, top_k, dim=-1)
    vals = vals / vals.sum(-1, keepdim=True)
    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float64)
    for e in range(w.shape[0]):
        rows, slots = torch.nonzero(picks == e, as_tuple=True)
        if len(rows):
            out.index_add_(0, rows, vals[rows, slots, None] * (xt[rows] @ wt[e]))
    return out.numpy()


@pytest.mark.parametrize("scores", ["softmax", "sigmoid"])
def test_top_k_gated_moe_runs_on_the_gpu(device, scores):
    rows, hidden, out, experts, top_k = 37, 24, 40, 16, 4
    r = np.random.default_rng(3)
    x = r.standard_normal((rows, hidden)).astype(np.float32)
    logits = r.standard_normal((rows, experts)).astype(np.float32)
    w = (r.standard_normal((experts, hidden, out)) / np.sqrt(hidden)).astype(np.float32)
    g = rlxpy.Graph("moe_layer")
    nodes = g.input("x", x.shape), g.input("logits", logits.shape), g.param("w", w.shape)
    y = moe_layer(g, *nodes, top_k, scores)
    g.output(y)
    exe = rlxpy.compile(g)
    exe.set_param("w", w)
    assert {s.kind for s in exe.schedule.steps} == {"gpu"}, "gate, routing and experts: no host step"
    got = exe.run({"x": x, "logits": logits})["moe"]
    assert_close(got, moe_torch(x, logits, w, top_k, scores), *TOL["matmul"], "GPU vs torch")


def test_without_scratch_for_the_routing_table_it_runs_on_the_host(device, monkeypatch):
    monkeypatch.setitem(SCRATCH, ops.GroupedMatMul, lambda node, graph: 0)
    monkeypatch.setattr(arena, "SCRATCH_MIN", 0)
    r = np.random.default_rng(4)
    x, w = r.standard_normal((20, 8)).astype(np.float32), r.standard_normal((3, 8, 5)).astype(np.float32)
    idx = r.integers(0, 3, 20).astype(np.int32)
    g = rlxpy.Graph("moe_host")
    nodes = g.input("x", x.shape), g.param("w", w.shape), g.input("idx", idx.shape, "i32")
    g.output(g.grouped_matmul(*nodes, name="y"))
    exe = rlxpy.compile(g)
    exe.set_param("w", w)
    assert [s.kind for s in exe.schedule.steps] == ["host"]
    assert_close(exe.run({"x": x, "idx": idx})["y"], experts_torch(x, w, idx), *TOL["matmul"], "host step")


def test_long_k_rounding_is_no_worse_than_torch_f32(device):
    """The tiled kernel sums each 8-deep K step on its own before adding it to the running sum, so
    over K = 1536 its f32 error (rms, relative to float64) stays within 1.5x of torch's f32 matmul
    (one running sum per output was 2.7x)."""
    r = np.random.default_rng(7)
    rows, k, n, experts = 130, 1536, 70, 2
    x = r.standard_normal((rows, k)).astype(np.float32)
    w = (r.standard_normal((experts, k, n)) / np.sqrt(k)).astype(np.float32)
    idx = r.integers(0, experts, rows).astype(np.int32)
    got, _ = run_grouped(x, w, idx)
    want = experts_torch(x, w, idx)
    ours = torch.zeros(rows, n)
    for e in range(experts):
        sel = torch.from_numpy(np.flatnonzero(idx == e))
        ours[sel] = torch.from_numpy(x)[sel] @ torch.from_numpy(w[e])

    def rms(a: np.ndarray) -> float:
        return float(np.sqrt(((a.astype(np.float64) - want) ** 2).mean() / (want ** 2).mean()))

    assert rms(got) <= 1.5 * rms(ours.numpy()), (rms(got), rms(ours.numpy()))


@pytest.mark.parametrize("rows", [8, 100])
def test_under_a_binding_cap(device, rows):
    """RLX_WGPU_MAX_BINDING caps the arena window below the graph's size: both GEMM kernels (few rows,
    tiled) read and write through their node's window, no host step, against torch."""
    r = np.random.default_rng(rows)
    x = r.standard_normal((rows, 20)).astype(np.float32)
    w = r.standard_normal((4, 20, 70)).astype(np.float32)
    idx = r.integers(0, 4, rows).astype(np.int32)
    g = rlxpy.Graph("moe_capped")
    h = g.relu(g.input("x", x.shape))
    y = g.grouped_matmul(h, g.param("w", w.shape), g.input("idx", idx.shape, "i32"))
    g.output(g.relu(y, name="z"))
    with env.override(RLX_WGPU_MAX_BINDING=80 << 10):
        exe = rlxpy.compile(g)
    assert exe.schedule.window_size <= 80 << 10 < exe.schedule.arena.size
    assert "host" not in [s.kind for s in exe.schedule.steps]
    exe.set_param("w", w)
    want = np.maximum(experts_torch(np.maximum(x, 0), w, idx), 0)
    assert_close(exe.run({"x": x, "idx": idx})["z"], want, *TOL["matmul"], "capped vs torch")


def test_16_deep_steps_fall_back_to_8_deep_within_16_kib():
    """The default 64x64 tile steps 16 k deep (16.3 KiB of workgroup memory with its row ids); a
    device with 16 KiB gets 8-deep steps (lowering only; both depths run against torch above)."""
    g = rlxpy.Graph("moe_depth")
    nodes = g.input("x", (300, 40)), g.input("w", (2, 40, 70)), g.input("idx", (300,), "i32")
    g.output(g.grouped_matmul(*nodes, name="y"))
    for storage, depth in [(32768, 16), (16384, 8)]:
        steps = lower_graph(prepare(g), DeviceFacts(max_workgroup_storage=storage)).steps
        (gemm,) = [s for s in steps if s.kernel == "matmul_grouped"]
        assert f"const RT_K: u32 = {depth}u;" in gemm.source


def test_tile_plan_fills_its_rows_fits_the_workgroup_memory_and_runs_unchecked():
    assert matmul_grouped.choose_tile(4096, 8, 8192) == (128, 128), "512 rows an expert fill 128-row tiles"
    assert matmul_grouped.core(128, 128) == (8, "none")
    assert matmul_grouped.choose_tile(4096, 64, 1408) == (64, 128), "64 rows an expert: 64-row tiles"
    assert matmul_grouped.choose_tile(4096, 8, 8192, storage=16384) == (64, 128), "128x128 needs 16.5 KiB"
    assert not matmul_grouped.MATMUL_GROUPED.checked and matmul_grouped.MATMUL_GROUPED_ROUTE.checked

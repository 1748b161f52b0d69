"""GGUF quantised matmul / embedding lookup on the GPU, against gguf-py's decoder and torch.

Dequantised values are checked bit for bit (GatherGguf over every row == gguf.quants.dequantize);
matmuls (GEMV for <= 8 x rows, tiled kernel above) against torch on the dequantised weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from helpers import assert_close

import rlxpy
from rlxpy.errors import GraphError, InputError, UnsupportedOpError
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.quant import GGUF_BLOCKS, gguf_row_bytes
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend.lowering import matmul
from rlxpy.wgpu_backend.lowering.quant_gguf import (
    GEMV_BLOCKED_MAX_ROWS,
    GEMV_MAX_ROWS,
    ROWS_X_MAX,
    TILED_MIN_ROWS,
    chunk_elems,
    gemv_plan,
)
from rlxpy.wgpu_backend.lowering.quant_gguf_wgsl import GPU_TYPES

QUANTISABLE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16")  # gguf-py can quantise these
K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
FLOATS = ("F32", "F16", "BF16")
#: byte offsets of the f16 super-block scales (d, and dmin where there is one) in K-quant blocks
K_SCALE_FIELDS = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
HOST_TYPES = ("Q8_1", "Q8_K", "IQ4_NL", "IQ4_XS")


def block_of(qtype: str) -> int:
    return GGUF_BLOCKS[qtype][0]


def sizes(qtype: str) -> tuple[int, int]:
    """(one block, several blocks) worth of k; float rows get odd lengths instead."""
    if qtype in FLOATS:
        return 37, 75
    block = block_of(qtype)
    return (block, 3 * block) if block == 32 else (block, 2 * block)


def make_weights(qtype: str, n: int, k: int, seed: int) -> np.ndarray:
    """u8 [n, row_bytes]: gguf-py quantised where it can, else random bytes with sane scales."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((n, k)).astype(np.float32)
    if qtype == "F32":
        return values.view(np.uint8).reshape(n, -1)
    if qtype == "F16":
        return values.astype(np.float16).view(np.uint8).reshape(n, -1)
    if qtype in QUANTISABLE:
        raw = quants.quantize(values, GGMLQuantizationType[qtype]).reshape(n, -1).copy()
        if block_of(qtype) == 32 and raw.size > 2 * GGUF_BLOCKS[qtype][1]:
            # edge scales: a subnormal and a negative subnormal f16 d in the first two blocks
            blocks = raw.reshape(-1, GGUF_BLOCKS[qtype][1])
            blocks[0, :2] = np.array([0x0001], np.uint16).view(np.uint8)
            blocks[1, :2] = np.array([0x83FF], np.uint16).view(np.uint8)
        return raw
    size = GGUF_BLOCKS[qtype][1]
    blocks = rng.integers(0, 256, size=(n * k // block_of(qtype), size), dtype=np.uint8)
    for offset in K_SCALE_FIELDS.get(qtype, ()):
        scale = rng.uniform(0.002, 0.05, len(blocks)) * rng.choice([-1.0, 1.0], len(blocks))
        blocks[:, offset:offset + 2] = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(n, -1)


def gguf_values(raw: np.ndarray, qtype: str) -> np.ndarray:
    """The oracle: gguf-py's dequantisation (numpy's own casts for F32/F16)."""
    if qtype == "F32":
        return raw.view(np.float32)
    if qtype == "F16":
        return raw.view(np.float16).astype(np.float32)
    return quants.dequantize(raw, GGMLQuantizationType[qtype])


def torch_matmul(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    y = torch.from_numpy(x.astype(np.float64)) @ torch.from_numpy(weight.astype(np.float64)).T
    return y.numpy()


def assert_matmul_close(got: np.ndarray, x: np.ndarray, weight: np.ndarray, what: str) -> None:
    """Within the f32 rounding bound of a k-term dot product: |err| <= c * sum_i |x_i w_i|."""
    want = torch_matmul(x, weight)
    bound = torch_matmul(np.abs(x), np.abs(weight))
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(got - want) <= 1e-5 * bound + 1e-6) & ~(np.isnan(got) & np.isnan(want)) & (got != want)
    assert not bad.any(), f"{what}: {bad.sum()} values off, e.g. {got[bad][:3]} vs {want[bad][:3]}"


def matmul_cases_graph(name: str, cases: list[tuple[str, int, int, int]], seed: int):
    """One graph of independent DequantMatMulGguf nodes y{i} = x{i} @ W{i}^T, a case (qtype, n, k, rows)
    each, with its weights (seeded seed + 1 + i) and random inputs (seeded seed)."""
    rng = np.random.default_rng(seed)
    g = rlxpy.Graph(name)
    weights, feeds = {}, {}
    for i, (qtype, n, k, rows) in enumerate(cases):
        weights[f"w{i}"] = make_weights(qtype, n, k, seed=seed + 1 + i)
        feeds[f"x{i}"] = rng.standard_normal((rows, k)).astype(np.float32)
        w = g.param(f"w{i}", weights[f"w{i}"].shape, DType.U8)
        g.output(g.dequant_matmul_gguf(g.input(f"x{i}", (rows, k)), w, qtype, n, k, name=f"y{i}"))
    return g, weights, feeds


def compile_with(g: rlxpy.Graph, weights: dict[str, np.ndarray]):
    exe = rlxpy.compile(g)
    for name, raw in weights.items():
        exe.set_param_bytes(name, raw.tobytes())
    return exe


# -- dequantised values: bit-exact ----------------------------------------------------------------
@pytest.mark.parametrize("qtype", sorted(GPU_TYPES))
def test_gather_dequantizes_every_row_bit_exactly_like_gguf(device, qtype):
    n, k = 33, sizes(qtype)[1]
    raw = make_weights(qtype, n, k, seed=1)
    if qtype in FLOATS:  # specials survive the decode untouched
        specials = np.array([np.inf, -np.inf, np.nan, -0.0, 6e-8, -1e-40], np.float32)
        values = gguf_values(raw, qtype).copy()
        values[3, :6] = specials
        raw = (values.view(np.uint8) if qtype == "F32" else
               values.astype(np.float16).view(np.uint8) if qtype == "F16" else
               quants.quantize(values, GGMLQuantizationType.BF16)).reshape(n, -1)
    g = rlxpy.Graph("gather")
    table = g.param("table", raw.shape, DType.U8)
    idx = g.input("idx", (n + 3,), DType.I32)
    y = g.gather_gguf(table, idx, qtype, k, name="rows")
    g.output(y)
    exe = compile_with(g, {"table": raw})
    assert [s.kernel for s in exe.schedule.steps] == ["quant_gguf_gather"]
    order = np.concatenate([np.arange(n), [-7, n, n + 100]]).astype(np.int32)  # last 3 clamp
    got = exe.run({"idx": order})["rows"]
    want = gguf_values(raw, qtype)[np.clip(order, 0, n - 1)]
    assert got.shape == (n + 3, k)
    np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32),
                                  err_msg=f"{qtype}: dequantised bits differ from gguf-py")


@pytest.mark.parametrize("idx_dtype", [DType.F32, DType.U32])
def test_gather_truncates_and_clamps_float_and_unsigned_indices(device, idx_dtype):
    raw = make_weights("Q8_0", 5, 64, seed=2)
    g = rlxpy.Graph("gather_idx")
    idx = g.input("idx", (2, 3), idx_dtype)
    y = g.gather_gguf(g.param("table", raw.shape, DType.U8), idx, "Q8_0", 64, name="rows")
    g.output(y)
    exe = compile_with(g, {"table": raw})
    if idx_dtype is DType.F32:
        order = np.array([[0.9, 3.7, -2.5], [np.nan, 99.0, 4.0]], np.float32)
        rows = [0, 3, 0, 0, 4, 4]
    else:
        order = np.array([[1, 4, 0], [2, 77, 3]], np.uint32)
        rows = [1, 4, 0, 2, 4, 3]
    got = exe.run({"idx": order})["rows"]
    want = gguf_values(raw, "Q8_0")[rows].reshape(2, 3, 64)
    np.testing.assert_array_equal(got, want)


# -- matmuls: GEMV (few rows) and tiled (many rows) -----------------------------------------------
@pytest.mark.parametrize("qtype", sorted(GPU_TYPES))
def test_matmul_gemv_and_tiled_match_torch(device, qtype, gemv_kernel):
    one, several = sizes(qtype)
    # (n, k, x rows): n = 1, 3, 17, 33; k one block / several; rows 1, 5 (one GEMV block), 17 (GEMV
    # blocks of 8 rows, the last one partial), 70 (tiled on GPUs, GEMV blocks on CPUs) and 2055 (tiled)
    cases = [(1, one, 1), (3, several, 5), (17, one, 17), (33, several, 1), (33, several, 17),
             (17, several, 5), (3, several, 70), (17, one, 2055)]
    g = rlxpy.Graph("qmm")
    weights, feeds, outs = {}, {}, []
    rng = np.random.default_rng(3)
    for i, (n, k, rows) in enumerate(cases):
        weights[f"w{i}"] = make_weights(qtype, n, k, seed=10 + i)
        feeds[f"x{i}"] = rng.standard_normal((rows, k)).astype(np.float32)
        x = g.input(f"x{i}", (rows, k))
        w = g.param(f"w{i}", weights[f"w{i}"].shape, DType.U8)
        outs.append(g.dequant_matmul_gguf(x, w, qtype, n, k, name=f"y{i}"))
    g.output(*outs)
    exe = compile_with(g, weights)
    gemv_rows = TILED_MIN_ROWS - 1 if gemv_kernel == "quant_gguf_gemv" else GEMV_BLOCKED_MAX_ROWS
    block = GEMV_MAX_ROWS if gemv_kernel == "quant_gguf_gemv" else ROWS_X_MAX  # x rows per grid row
    want = []  # (kernel, grid) of each step
    for n, k, rows in cases:
        if rows <= gemv_rows or k % 4:  # the tiled GEMM decodes 4 k at a time
            want.append((gemv_kernel, -(-rows // block)))
        else:
            want += tiled_kernels(rows, n, k)
    assert [(s.kernel, s.grid[1]) for s in exe.schedule.steps] == want
    got = exe.run(feeds)
    for i, (n, k, rows) in enumerate(cases):
        weight = gguf_values(weights[f"w{i}"], qtype).reshape(n, k)
        assert_matmul_close(got[f"y{i}"], feeds[f"x{i}"], weight, f"{qtype} n={n} k={k} rows={rows}")
    if qtype in ("Q4_1", "Q6_K"):  # the reference agrees too (it is gguf-py + float64 numpy)
        ref = run_reference(g, feeds, weights)
        for i in range(len(cases)):
            assert_matmul_close(got[f"y{i}"], feeds[f"x{i}"], gguf_values(weights[f"w{i}"], qtype).reshape(
                ref[f"y{i}"].shape[1], -1), f"GPU vs reference y{i}")
            assert_close(got[f"y{i}"], ref[f"y{i}"], 1e-4, 1e-3, f"GPU vs reference y{i}")


def tiled_kernels(rows: int, n: int, k: int) -> list[tuple[str, int]]:
    """(kernel, grid y) of the steps of a tiled quantised matmul: matmul's tile plan and K split."""
    bm, _ = matmul.choose_tile(rows, n, 1)
    split = [("matmul_split_sum", 1)] if matmul.k_splits(rows, n, k, 1) > 1 else []
    return [("quant_gguf_gemm", -(-rows // bm)), *split]


@pytest.mark.parametrize("tile", matmul.TILES)
@pytest.mark.parametrize("splits", [None, 2])
def test_every_tile_and_k_split_of_the_tiled_gemm_matches_torch(device, monkeypatch, gpu_variant, tile,
                                                                splits):
    """quant_gguf_gemm on each of matmul's tiles, with the plan's K split and with K cut in two (where
    K allows): partial tiles in m and n, K not a multiple of the 8- or 16-deep step (F16: 76), a
    K-quant whose scale changes every 16 k, and an F16 row of 75 (not a multiple of 4: the GEMV)."""
    from rlxpy.wgpu_backend.lowering import quant_gguf

    monkeypatch.setattr(matmul, "FORCE_TILE", tile)
    monkeypatch.setattr(matmul, "FORCE_SPLITS", splits)
    monkeypatch.setattr(quant_gguf, "TILED_MIN_ROWS", 1)  # few rows too: one partial row tile
    cases = [("Q4_1", 17, 96, 255), ("F16", 33, 76, 40), ("Q6_K", 70, 256, 129), ("Q8_0", 3, 64, 32),
             ("F16", 5, 75, 9), ("Q5_1", 36, 96, 70), ("Q4_K", 8, 512, 65)]
    g, weights, feeds = matmul_cases_graph("tiles", cases, 40)
    exe = compile_with(g, weights)
    want = []
    for _, n, k, rows in cases:
        chunks = matmul.k_splits(rows, n, k, 1)  # FORCE_SPLITS when set and K allows, else the plan's
        want += ([("quant_gguf_gemv", -(-rows // GEMV_MAX_ROWS))] if k % 4 else
                 [("quant_gguf_gemm", (-(-n // tile[1]), -(-rows // tile[0]), chunks))]
                 + ([("matmul_split_sum", None)] if chunks > 1 else []))
    got_steps = [(s.kernel, s.grid if s.kernel == "quant_gguf_gemm" else s.grid[1] if "gemv" in s.kernel
                  else None) for s in exe.schedule.steps]
    assert got_steps == want
    # N a multiple of 4 (and x, y on 4-element boundaries): 16-byte loads of x and stores of y
    vec4 = ["fn aw(i: u32) -> u32 {  // arena word i" in s.source for s in exe.schedule.steps
            if s.kernel == "quant_gguf_gemm"]
    assert vec4 == [n % 4 == 0 for _, n, k, _ in cases if k % 4 == 0]
    got = exe.run(feeds)
    for i, (qtype, n, k, rows) in enumerate(cases):
        weight = gguf_values(weights[f"w{i}"], qtype).reshape(n, k)
        assert_matmul_close(got[f"y{i}"], feeds[f"x{i}"], weight, f"{tile} {qtype} n={n} k={k} rows={rows}")


@pytest.mark.parametrize(("qtype", "rows", "k"),
                         [("Q4_0", 1, 4096 + 256), ("Q5_K", 8, 1024), ("F16", 3, 2701)])
def test_gemv_stages_long_rows_in_chunks(device, qtype, rows, k, gemv_kernel):
    assert k > chunk_elems(rows, k)  # more than one chunk of x goes through workgroup memory
    raw = make_weights(qtype, 3, k, seed=4)
    x = np.random.default_rng(5).standard_normal((rows, k)).astype(np.float32)
    g = rlxpy.Graph("long")
    y = g.dequant_matmul_gguf(g.input("x", x.shape), g.param("w", raw.shape, DType.U8), qtype, 3, k, name="y")
    g.output(y)
    got = compile_with(g, {"w": raw}).run({"x": x})["y"]
    assert_matmul_close(got, x, gguf_values(raw, qtype).reshape(3, k), qtype)


def test_leading_dims_of_x_are_flattened_into_rows(device):
    raw = make_weights("Q4_K", 17, 256, seed=6)
    x = np.random.default_rng(7).standard_normal((2, 3, 256)).astype(np.float32)
    g = rlxpy.Graph("lead")
    y = g.dequant_matmul_gguf(g.input("x", x.shape), g.param("w", raw.shape, DType.U8), "Q4_K", 17, 256,
                              name="y")
    g.output(y)
    got = compile_with(g, {"w": raw}).run({"x": x})["y"]
    assert got.shape == (2, 3, 17)
    assert_matmul_close(got.reshape(6, 17), x.reshape(6, 256), gguf_values(raw, "Q4_K").reshape(17, 256), "x")


def test_nan_and_inf_propagate_like_torch(device, gemv_kernel):
    values = np.random.default_rng(8).standard_normal((5, 36)).astype(np.float32)
    values[1, 4] = np.inf
    values[3, 0] = np.nan
    raw = values.astype(np.float16).view(np.uint8)
    x = np.random.default_rng(9).standard_normal((70, 36)).astype(np.float32)  # tiled on GPUs (K % 4 == 0)
    x[2, 5] = np.nan
    g = rlxpy.Graph("nan")
    w = g.param("w", raw.shape, DType.U8)
    xs = g.input("x", x.shape)
    y1 = g.dequant_matmul_gguf(g.input("x1", (1, 36)), w, "F16", 5, 36, name="gemv")
    y2 = g.dequant_matmul_gguf(xs, w, "F16", 5, 36, name="tiled")
    g.output(y1, y2)
    exe = compile_with(g, {"w": raw})
    tiled = [s.kernel for s in exe.schedule.steps if exe.graph[s.node].name == "tiled"]
    assert tiled[0] == ("quant_gguf_gemm" if gemv_kernel == "quant_gguf_gemv" else gemv_kernel)
    got = exe.run({"x": x, "x1": x[2:3]})
    weight = values.astype(np.float16).astype(np.float32)
    assert_matmul_close(got["gemv"], x[2:3], weight, "gemv")
    assert_matmul_close(got["tiled"], x, weight, "tiled")
    assert np.isnan(got["tiled"][2]).all() and np.isnan(got["tiled"][:, 3]).all()


# -- MoE: grouped matmul ----------------------------------------------------------------------------
@pytest.mark.parametrize(("qtype", "idx_dtype"),
                         [("Q4_1", DType.F32), ("Q6_K", DType.I32), ("Q8_0", DType.U32)])
def test_grouped_matmul_picks_each_rows_expert(device, qtype, idx_dtype, gemv_kernel):
    experts, n, k, rows = 3, 17, sizes(qtype)[1], 6
    slabs = np.stack([make_weights(qtype, n, k, seed=20 + e) for e in range(experts)])
    x = np.random.default_rng(11).standard_normal((rows, k)).astype(np.float32)
    if idx_dtype is DType.F32:
        choice = np.array([2.9, 0.0, -1.0, 1.5, 7.0, 2.0], np.float32)  # truncated; -1 and 7 -> zeros
    else:
        choice = np.array([2, 0, 5, 1, 1, 2]).astype(idx_dtype.numpy)  # 5 is out of range -> zeros
    g = rlxpy.Graph("moe")
    y = g.dequant_grouped_matmul(g.input("x", x.shape), g.param("w", slabs.shape, DType.U8),
                                 g.input("idx", (rows,), idx_dtype), qtype, n, k, name="y")
    g.output(y)
    exe = compile_with(g, {"w": slabs})
    assert [s.kernel for s in exe.schedule.steps] == [gemv_kernel]
    got = exe.run({"x": x, "idx": choice})["y"]
    for i, e in enumerate(np.trunc(choice.astype(np.float64)).astype(int)):
        if 0 <= e < experts:
            weight = gguf_values(slabs[e], qtype).reshape(n, k)
            assert_matmul_close(got[i:i + 1], x[i:i + 1], weight, f"row {i}")
        else:
            assert not got[i].any(), f"row {i}: expert {e} is out of range, the row must be zero"
    ref = run_reference(g, {"x": x, "idx": choice}, {"w": slabs})["y"]
    assert_close(got, ref, 1e-4, 1e-3, "GPU vs reference")


# -- host fallback -------------------------------------------------------------------------------
def _host_weights(qtype: str, n: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(raw rows, their values) decoded here independently of host_ops (struct field by field)."""
    block, size = GGUF_BLOCKS[qtype]
    count = n * k // block
    if qtype == "Q8_1":
        d = rng.uniform(-0.1, 0.1, count).astype("<f4")
        q = rng.integers(-128, 128, (count, 32)).astype(np.int8)
        s = (d * q.sum(1)).astype("<f4")
        raw = np.concatenate([d.view(np.uint8).reshape(-1, 4), s.view(np.uint8).reshape(-1, 4),
                              q.view(np.uint8)], axis=1)
        return raw.reshape(n, -1), (d[:, None] * q.astype(np.float32)).reshape(n, k)
    if qtype == "Q8_K":
        d = rng.uniform(-0.1, 0.1, count).astype("<f4")
        q = rng.integers(-128, 128, (count, 256)).astype(np.int8)
        sums = q.reshape(count, 16, 16).sum(-1).astype("<i2")
        raw = np.concatenate([d.view(np.uint8).reshape(-1, 4), q.view(np.uint8), sums.view(np.uint8)], axis=1)
        return raw.reshape(n, -1), (d[:, None] * q.astype(np.float32)).reshape(n, k)
    blocks = rng.integers(0, 256, (count, size), dtype=np.uint8)
    blocks[:, :2] = rng.uniform(0.001, 0.01, count).astype(np.float16).view(np.uint8).reshape(-1, 2)
    raw = blocks.reshape(n, -1)
    return raw, gguf_values(raw, qtype).reshape(n, k)


@pytest.mark.parametrize("qtype", HOST_TYPES)
def test_types_without_a_wgsl_decoder_run_as_host_steps(device, qtype):
    n, k = 3, GGUF_BLOCKS[qtype][0] * 2
    rng = np.random.default_rng(12)
    raw, weight = _host_weights(qtype, n, k, rng)
    x = rng.standard_normal((2, k)).astype(np.float32)
    g = rlxpy.Graph("host")
    w = g.param("w", raw.shape, DType.U8)
    y = g.dequant_matmul_gguf(g.input("x", x.shape), w, qtype, n, k, name="y")
    rows = g.gather_gguf(w, g.input("idx", (2,), DType.I32), qtype, k, name="rows")
    g.output(y, rows)
    exe = compile_with(g, {"w": raw})
    steps = [(s.kind, s.kernel) for s in exe.schedule.steps]
    assert steps == [("host", "gguf_matmul"), ("host", "gguf_gather")]
    got = exe.run({"x": x, "idx": np.array([2, -1], np.int32)})
    assert_matmul_close(got["y"], x, weight, qtype)
    assert_close(got["rows"], weight[[2, 0]], 0, 0, f"{qtype} rows")


def test_grouped_matmul_host_fallback(device):
    rng = np.random.default_rng(13)
    slabs = np.stack([_host_weights("IQ4_NL", 5, 64, rng)[0] for _ in range(2)])
    x = rng.standard_normal((3, 64)).astype(np.float32)
    choice = np.array([1.0, 0.0, 9.0], np.float32)
    g = rlxpy.Graph("moe_host")
    y = g.dequant_grouped_matmul(g.input("x", x.shape), g.param("w", slabs.shape, DType.U8),
                                 g.input("idx", (3,)), "IQ4_NL", 5, 64, name="y")
    g.output(y)
    exe = compile_with(g, {"w": slabs})
    assert [s.kind for s in exe.schedule.steps] == ["host"]
    got = exe.run({"x": x, "idx": choice})["y"]
    assert_close(got, run_reference(g, {"x": x, "idx": choice}, {"w": slabs})["y"], 1e-5, 1e-5, "IQ4_NL")
    assert not got[2].any()


# -- errors and planning ---------------------------------------------------------------------------
def test_wrong_weight_byte_count_is_an_input_error(device):
    g = rlxpy.Graph("bad_bytes")
    w = g.param("w", (3, gguf_row_bytes("Q4_1", 64)), DType.U8)
    g.output(g.dequant_matmul_gguf(g.input("x", (1, 64)), w, "Q4_1", 3, 64))
    exe = rlxpy.compile(g)
    with pytest.raises(InputError, match="'w'.*expected 120 bytes, got 119"):
        exe.set_param_bytes("w", bytes(119))


def test_k_not_a_multiple_of_the_block_is_a_graph_error():
    g = rlxpy.Graph("bad_k")
    x = g.input("x", (1, 48))
    with pytest.raises(GraphError, match=r"qmm.*row size \(48\) is not a multiple of Q4_K block size"):
        g.dequant_matmul_gguf(x, g.param("w", (2, 27), DType.U8), "Q4_K", 2, 48, name="qmm")
    with pytest.raises(GraphError, match=r"qmm2.*Q8_0 weight must be u8\[2, 68\], got u8\[2, 50\]"):
        g.dequant_matmul_gguf(g.input("x2", (1, 64)), g.param("w2", (2, 50), DType.U8), "Q8_0", 2, 64,
                              name="qmm2")


def test_non_f32_x_is_refused_naming_the_node(device):
    g = rlxpy.Graph("bad_x")
    x = g.input("x", (1, 32), DType.F16)
    y = g.dequant_matmul_gguf(x, g.param("w", (2, 34), DType.U8), "Q8_0", 2, 32, name="proj")
    g.output(y)
    with pytest.raises(UnsupportedOpError, match=r"proj \(DequantMatMulGguf\): quant_gguf_\w+ is lowered for "
                                                 r"f32 only, input 0 x"):
        rlxpy.compile(g)


@pytest.mark.parametrize("units", [1, 2, 18, 31, 32, 33, 48, 100, 448])
@pytest.mark.parametrize("rows", [1, 576, 49152])
def test_gemv_plan_covers_a_row_evenly(units, rows):
    lanes, teams, team_rows = gemv_plan(units, rows)
    passes = -(-units // lanes)
    cap = 16 if rows >= 8192 else 32
    assert 1 <= lanes <= cap and teams == 256 // lanes and 1 <= team_rows <= 4
    assert passes == max(1, -(-units // cap)) and lanes * passes - units < passes  # no idle pass
    assert team_rows == 1 or -(-rows // (teams * team_rows)) >= 128  # enough workgroups stay


@pytest.mark.parametrize("units", [1, 3, 18, 33, 48, 448])
@pytest.mark.parametrize("rows", [1, 576, 49152])
def test_gemv_plan_for_subgroups_takes_power_of_two_teams(units, rows):
    lanes, teams, _ = gemv_plan(units, rows, pow2=True)
    even = gemv_plan(units, rows)[0]
    assert lanes & (lanes - 1) == 0 and even <= lanes < 2 * even and teams == 256 // lanes
    assert -(-units // lanes) == -(-units // even)  # the same passes over the row


@pytest.mark.parametrize("use_subgroups", [True, False])
def test_gemv_subgroup_sums_where_the_device_has_them(device, monkeypatch, gpu_variant, use_subgroups):
    """With the ``subgroup`` feature (lavapipe, Vulkan GPUs) the team sums are shuffles, without it
    (or switched off) workgroup memory; both against torch. The shapes give teams of 1 to 32 lanes
    (lavapipe's subgroups are 8 wide: smaller teams share one, larger ones span several), several
    rows per team, 1 to 5 x rows, x staged in one chunk or several; big matrices keep workgroup
    memory. Tolerance: assert_matmul_close's, as for the other GEMVs (only the f32 sum order changes)."""
    from rlxpy.wgpu_backend.lowering import quant_gguf

    monkeypatch.setattr(quant_gguf, "USE_SUBGROUPS", use_subgroups)
    monkeypatch.setattr(quant_gguf, "MIN_GROUPS", 1)  # several rows per team on small matrices too
    cases = [("Q4_1", 17, 32, 1), ("Q8_0", 33, 96, 5), ("Q6_K", 70, 512, 1), ("Q4_0", 255, 1024, 3),
             ("F16", 3, 75, 1), ("Q5_K", 40, 4096 + 256, 1), ("Q4_1", quant_gguf.SUBGROUP_MAX_ROWS, 64, 1)]
    g, weights, feeds = matmul_cases_graph("subgroups", cases, 50)
    exe = compile_with(g, weights)
    shuffles = use_subgroups and "subgroup" in device.features
    assert [("subgroupShuffleXor" in s.source, s.kernel) for s in exe.schedule.steps] == [
        (shuffles and n < quant_gguf.SUBGROUP_MAX_ROWS, "quant_gguf_gemv") for _, n, _, _ in cases]
    # one x row in one chunk stages x once (FAST_STAGE: subgroupAdd, whatever the team sums use)
    assert [("FAST_STAGE: bool = true" in s.source) for s in exe.schedule.steps] == [
        "subgroup" in device.features and rows == 1 and k <= quant_gguf.XS_FLOATS for _, _, k, rows in cases]
    got = exe.run(feeds)
    for i, (qtype, n, k, rows) in enumerate(cases):
        weight = gguf_values(weights[f"w{i}"], qtype).reshape(n, k)
        assert_matmul_close(got[f"y{i}"], feeds[f"x{i}"], weight, f"{qtype} n={n} k={k} rows={rows}")


@pytest.mark.parametrize(("qtype", "k"), [("Q4_K", 512), ("Q5_0", 512), ("F16", 300)])
def test_gemv_teams_owning_several_rows(device, monkeypatch, qtype, k, gpu_variant):
    """Big matrices give each team several weight rows; force that on a small one."""
    from rlxpy.wgpu_backend.lowering import quant_gguf

    monkeypatch.setattr(quant_gguf, "MIN_GROUPS", 1)
    n = 70  # the last workgroup's teams own fewer rows than the others
    raw = make_weights(qtype, n, k, seed=30)
    rng = np.random.default_rng(31)
    g = rlxpy.Graph("teams")
    w = g.param("w", raw.shape, DType.U8)
    feeds = {"x1": rng.standard_normal((1, k)).astype(np.float32),
             "x3": rng.standard_normal((3, k)).astype(np.float32)}
    g.output(*[g.dequant_matmul_gguf(g.input(name, value.shape), w, qtype, n, k, name=f"y_{name}")
               for name, value in feeds.items()])
    exe = compile_with(g, {"w": raw})
    team_rows = [int(s.source.split("const RR: u32 = ")[1].split("u")[0]) for s in exe.schedule.steps]
    assert min(team_rows) >= 2, team_rows
    got = exe.run(feeds)
    weight = gguf_values(raw, qtype).reshape(n, k)
    for name, value in feeds.items():
        assert_matmul_close(got[f"y_{name}"], value, weight, f"{qtype} {name}")

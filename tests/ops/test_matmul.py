"""f32 matmuls against torch.matmul. Two kernels: the tiled GEMM (matmul_tiled; every tile shape, with
16-byte and word-by-word access) and the skinny GEMM that takes few-row GEMMs on a 2-D weight
(matmul_skinny). 2-D, [..,M,K]x[K,N], batched [L..,M,K]x[L..,K,N], FusedMatMulBiasAct with every
activation, SplitMatMul's split store and the active extent, on sizes around the 64/128 tiles, the
8- and 16-deep K steps, the 4-element vec4 groups and the skinny kernel's row limit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import TOL, assert_close, check_op, rand

import rlxpy
from rlxpy import env
from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import ActKind
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.kernels.params import KERNELS
from rlxpy.wgpu_backend.lowering import matmul, matmul_core, matmul_skinny
from rlxpy.wgpu_backend.schedule import DeviceFacts

F = torch.nn.functional
SKINNY_ROWS = matmul_skinny.F32_MAX_ROWS

# (M, K, N): 1, 3, 17, 63, 64, 65, 255 on every side; K off the 8-wide step except where stated
SIZES = [(1, 1, 1), (3, 17, 5), (1, 255, 3), (17, 33, 65), (63, 64, 65), (64, 16, 64), (65, 65, 63),
         (255, 17, 255), (255, 255, 1), (3, 255, 64), (64, 63, 17), (65, 1, 65), (17, 3, 255),
         (255, 255, 255), (SKINNY_ROWS, 9, 7), (SKINNY_ROWS + 1, 9, 7)]
ALL_TILES = [(128, 128), (128, 64), (64, 128), (64, 64)]  # (BM, BN) the kernel takes
# multiples of 4 on K and N (the vec4 path), with M, N and K off the tiles
ALIGNED = [(129, 36, 132), (1, 8, 4), (255, 68, 260), (130, 4, 200), (33, 12, 64)]


def kernels_of(exe) -> list[str]:
    return [step.kernel for step in exe.schedule.steps]


def fields_of(step) -> dict[str, int]:
    return KERNELS[step.kernel].params.unpack(step.uniforms)


def uses_vec4(step) -> bool:
    return "array<vec4<u32>>" in step.source


@pytest.fixture
def tiled_only(monkeypatch):
    """Every f32 GEMM through the tiled kernel, however few its rows."""
    monkeypatch.setattr(matmul_skinny, "SKINNY_F32", False)


@pytest.mark.parametrize("route", ["auto", "tiled"])
@pytest.mark.parametrize("m,k,n", SIZES, ids=str)
def test_matmul_2d_matches_torch(device, monkeypatch, route, m, k, n):
    if route == "tiled":
        monkeypatch.setattr(matmul_skinny, "SKINNY_F32", False)
    a, w = rand((m, k), seed=m), rand((k, n), seed=n + 1)
    check_op(lambda g, x, y: g.matmul(x, y), [a, w], torch.matmul, tol="matmul")


def test_few_rows_take_the_skinny_kernel_and_many_the_tiled_one(device):
    def kernel_for(m: int) -> list[str]:
        g = rlxpy.Graph("mm")
        g.output(g.matmul(g.input("a", (m, 33)), g.param("w", (33, 129))))
        return kernels_of(rlxpy.compile(g))

    assert kernel_for(1) == kernel_for(SKINNY_ROWS) == ["matmul_skinny"]
    assert kernel_for(SKINNY_ROWS + 1) == ["matmul_tiled"]


def test_matmul_schedule_is_one_tiled_dispatch(device):
    g = rlxpy.Graph("mm")
    out = g.matmul(g.input("a", (65, 33)), g.input("w", (33, 129)))
    g.output(out)
    exe = rlxpy.compile(g)
    assert kernels_of(exe) == ["matmul_tiled"]
    assert exe.schedule.steps[0].grid == (3, 2, 1), "a small GEMM gets 64x64 tiles: ceil(129/64), ceil(65/64)"
    fields = fields_of(exe.schedule.steps[0])
    assert (fields["m"], fields["k"], fields["n"], fields["has_bias"]) == (65, 33, 129, 0)


def test_default_plan_is_128x64_tiles_then_64x64_in_16_deep_steps():
    for m, n, batch in [(4096, 4096, 1), (4096, 384, 1)]:
        assert matmul.choose_tile(m, n, batch) == (128, 64)
    for m, n, batch in [(1024, 1024, 1), (256, 4096, 1), (65, 129, 1)]:
        assert matmul.choose_tile(m, n, batch) == (64, 64), "fewer than MIN_GROUPS 128x64 tiles"
    assert matmul.core(128, 64) == (8, "k64")
    assert matmul.core(64, 64) == (16, "step")
    assert matmul.core(128, 128) == (8, "step"), "tiles CORES does not list take 8-deep steps"
    g = rlxpy.Graph("big")
    g.output(g.matmul(g.input("a", (2048, 256)), g.input("w", (256, 4100))))
    (step,) = lower_graph(prepare(g), DeviceFacts()).steps
    assert step.grid == (65, 16, 1) and uses_vec4(step) and not step.checked
    assert "const BM: u32 = 128u" in step.source and "const BK: u32 = 8u" in step.source
    g = rlxpy.Graph("small")
    g.output(g.matmul(g.input("a", (1024, 256)), g.input("w", (256, 1024))))
    (step,) = lower_graph(prepare(g), DeviceFacts()).steps
    assert "const BN: u32 = 64u" in step.source and "const BK: u32 = 16u" in step.source
    (step,) = lower_graph(prepare(g), DeviceFacts(max_workgroup_storage=8192)).steps
    assert "const BK: u32 = 8u" in step.source, "16-deep tiles (16 KiB) do not fit: 8-deep ones (8 KiB)"


def test_block_sums_span_whole_loop_iterations():
    assert matmul_core.block_steps(8, "k64") == 8 and matmul_core.block_steps(16, "stepq") == 1
    with pytest.raises(ValueError, match="multiple of 16"):
        matmul_core.block_steps(8, "k24")  # a block must start on buffer 0: an even number of steps
    with pytest.raises(ValueError, match="'none', 'step'"):
        matmul_core.block_steps(8, "rows")


@pytest.mark.parametrize("sums", ["none", "step", "steph", "stepq", "k32"])
def test_every_block_sum_matches_torch(device, monkeypatch, tiled_only, sums):
    """128x128 tiles (2 x 2 quadrants per thread) in 16-deep steps on K = 70: block sums per step,
    per 64-row group, per quadrant, per 32 of K (the last block partial), or none."""
    monkeypatch.setattr(matmul, "FORCE_TILE", (128, 128))
    monkeypatch.setattr(matmul, "FORCE_CORE", (16, sums))
    a, w = rand((130, 70), seed=1), rand((70, 136), seed=2)
    check_op(lambda g, x, y: g.matmul(x, y), [a, w], torch.matmul, tol="matmul")


@pytest.mark.parametrize("vec4", [True, False], ids=["vec4", "words"])
@pytest.mark.parametrize("tile", ALL_TILES, ids=str)
@pytest.mark.parametrize("m,k,n", [*ALIGNED, (65, 17, 129), (130, 9, 3), (1, 1, 1)], ids=str)
def test_every_tile_and_access_matches_torch(device, monkeypatch, tiled_only, tile, vec4, m, k, n):
    monkeypatch.setattr(matmul, "FORCE_TILE", tile)
    monkeypatch.setattr(matmul, "VEC4", vec4)
    a, w, bias = rand((m, k), seed=m), rand((k, n), seed=n + 1), rand((n,), seed=k)
    g = rlxpy.Graph("tile")
    g.output(g.linear(g.input("x", (m, k)), g.param("w", (k, n)), g.param("b", (n,)), "gelu", name="y"))
    exe = rlxpy.compile(g)
    (step,) = exe.schedule.steps
    assert uses_vec4(step) == (vec4 and k % 4 == 0 and n % 4 == 0)
    assert step.grid == (math.ceil(n / tile[1]), math.ceil(m / tile[0]), 1)
    exe.set_param("w", w)
    exe.set_param("b", bias)
    got = exe.run({"x": a})["y"]
    want = F.gelu(torch.from_numpy(a).double() @ torch.from_numpy(w).double()
                  + torch.from_numpy(bias).double())
    assert_close(got, want.numpy(), *TOL["matmul"], what=f"tile {tile}")


@pytest.mark.parametrize("start", [4, 2], ids=["aligned", "offset-2-words"])
def test_a_view_off_the_vec4_boundary_loads_word_by_word(device, start):
    """a = a narrow of a flat input reshaped to [40, 8]: its first element sits `start` words in."""
    m, k, n = 40, 8, 12
    flat, w = rand((1, start + m * k + 3), seed=5), rand((k, n), seed=6)
    g = rlxpy.Graph("view")
    a = g.reshape(g.narrow(g.input("x", flat.shape), 1, start, m * k), (m, k))
    g.output(g.matmul(a, g.param("w", (k, n)), name="y"))
    exe = rlxpy.compile(g)
    (step,) = [s for s in exe.schedule.steps if s.kind == "gpu"]
    assert step.kernel == "matmul_tiled" and uses_vec4(step) == (start % 4 == 0)
    exe.set_param("w", w)
    got = exe.run({"x": flat})["y"]
    assert_close(got, flat[0, start:start + m * k].reshape(m, k) @ w, *TOL["matmul"])


def test_long_k_runs_every_step(device, tiled_only):
    a, w = rand((40, 3001), seed=7, low=-1, high=1), rand((3001, 5), seed=8, low=-1, high=1)
    check_op(lambda g, x, y: g.matmul(x, y), [a, w], torch.matmul, tol=(1e-4, 1e-3))


@pytest.mark.parametrize("a_shape,w_shape", [((2, 3, 17, 33), (33, 65)), ((5, 1, 7), (7, 3)),
                                             ((4, 64, 17), (17, 1)), ((1, 255, 16), (16, 63))], ids=str)
def test_leading_dims_times_2d_weight_is_one_gemm(device, a_shape, w_shape):
    a, w = rand(a_shape, seed=1), rand(w_shape, seed=2)
    g = rlxpy.Graph("rows")
    out = g.matmul(g.input("x0", a_shape), g.param("w", w_shape))
    g.output(out)
    exe = rlxpy.compile(g)
    exe.set_param("w", w)
    got = exe.run({"x0": a})[out.name]
    np.testing.assert_allclose(got, torch.matmul(torch.from_numpy(a), torch.from_numpy(w)).numpy(),
                               *TOL["matmul"])
    (step,) = exe.schedule.steps
    rows = math.prod(a_shape[:-1])
    assert step.kernel == ("matmul_skinny" if rows <= SKINNY_ROWS else "matmul_tiled")
    fields = fields_of(step)
    assert fields["m"] == rows and fields.get("stride_a", 0) == 0, "rows of all leading dims"


@pytest.mark.parametrize("a_shape,w_shape", [((3, 17, 33), (3, 33, 65)), ((2, 2, 65, 31), (2, 2, 31, 3)),
                                             ((1, 64, 64), (1, 64, 64)), ((7, 1, 1), (7, 1, 1)),
                                             ((2, 63, 255), (2, 255, 17)), ((3, 129, 36), (3, 36, 132))],
                         ids=str)
def test_batched_matmul_matches_torch(device, a_shape, w_shape):
    a, w = rand(a_shape, seed=3), rand(w_shape, seed=4)
    check_op(lambda g, x, y: g.matmul(x, y), [a, w], torch.matmul, tol="matmul")


def test_batched_strides_and_grid(device):
    g = rlxpy.Graph("bmm")
    g.output(g.matmul(g.input("a", (2, 3, 17, 33)), g.input("w", (2, 3, 33, 65))))
    (step,) = lower_graph(prepare(g), DeviceFacts()).steps
    fields = fields_of(step)
    assert step.kernel == "matmul_tiled", "a batched weight always takes the tiled kernel"
    assert step.grid == (2, 1, 6)
    assert (fields["stride_a"], fields["stride_w"], fields["stride_y"]) == (17 * 33, 33 * 65, 17 * 65)


# -- FusedMatMulBiasAct ----------------------------------------------------------------------------
def round_half_away(t: torch.Tensor) -> torch.Tensor:
    wide = t.double()
    return (torch.sign(wide) * torch.floor(wide.abs() + 0.5)).float()


EPILOGUES = {
    None: lambda t: t, ActKind.RELU: torch.relu, ActKind.SIGMOID: torch.sigmoid, ActKind.TANH: torch.tanh,
    ActKind.EXP: torch.exp, ActKind.LOG: torch.log, ActKind.SQRT: torch.sqrt, ActKind.RSQRT: torch.rsqrt,
    ActKind.NEG: torch.neg, ActKind.ABS: torch.abs, ActKind.GELU: F.gelu, ActKind.SILU: F.silu,
    ActKind.GELU_APPROX: lambda t: F.gelu(t, approximate="tanh"), ActKind.ROUND: round_half_away,
    ActKind.SIN: torch.sin, ActKind.COS: torch.cos, ActKind.TAN: torch.tan, ActKind.ATAN: torch.atan,
    ActKind.HARDSIGMOID: F.hardsigmoid, ActKind.HARDSWISH: F.hardswish,
}


def fused_operands(act: ActKind | None, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs that keep each epilogue well conditioned: positive pre-activations for log/sqrt/rsqrt,
    small ones for tan, and exact small integers plus quarter/half biases for round."""
    if act is ActKind.ROUND:
        rng = np.random.default_rng(9)
        x = rng.integers(-3, 4, (m, k)).astype(np.float32)
        w = rng.integers(-3, 4, (k, n)).astype(np.float32)
        return x, w, rng.choice([-0.5, 0.5, 0.25, -1.75, 2.5], n).astype(np.float32)
    if act in (ActKind.LOG, ActKind.SQRT, ActKind.RSQRT):
        return rand((m, k), 1, low=0, high=1), rand((k, n), 2, low=0, high=1), rand((n,), 3, low=0.5, high=1)
    scale = 0.25 if act is ActKind.TAN else 1.0
    x = rand((m, k), 1, low=-scale, high=scale)
    return x, rand((k, n), 2, low=-1, high=1), rand((n,), 3, low=-1, high=1)


# skinny; tiled word by word; tiled with vec4 bias loads and stores
@pytest.mark.parametrize("m,k,n", [(17, 33, 65), (65, 33, 65), (65, 36, 68)], ids=str)
@pytest.mark.parametrize("act", [None, *ActKind], ids=lambda a: a.name if a else "NONE")
def test_fused_matmul_bias_act_matches_torch(device, act, m, k, n):
    x, w, bias = fused_operands(act, m, k, n)
    out = check_op(lambda g, a, b, c: g.linear(a, b, c, act, name="fused"), [x, w, bias],
                   lambda a, b, c: EPILOGUES[act](a @ b + c), tol="matmul")["fused"]
    assert np.isfinite(out).all(), "the operands were chosen to keep every epilogue finite"


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (65, 255, 63), (255, 17, 3), (40, 20, 36)], ids=str)
def test_fused_matmul_with_leading_dims_and_edge_sizes(device, m, k, n):
    x, w, bias = rand((2, m, k), 4), rand((k, n), 5), rand((n,), 6)
    check_op(lambda g, a, b, c: g.linear(a, b, c, "gelu"), [x, w, bias], lambda a, b, c: F.gelu(a @ b + c),
             tol="matmul")


@pytest.mark.parametrize("m,kernel", [(5, "matmul_skinny"), (SKINNY_ROWS + 3, "matmul_tiled")])
def test_fused_schedule_sets_the_bias(device, m, kernel):
    g = rlxpy.Graph("fused")
    g.output(g.linear(g.input("x", (m, 7)), g.param("w", (7, 9)), g.param("b", (9,)), "silu"))
    (step,) = lower_graph(prepare(g), DeviceFacts()).steps
    assert step.kernel == kernel and fields_of(step)["has_bias"] == 1
    assert "v / (1.0 + exp(-v))" in step.source, "the activation is fused into the epilogue"


# -- split K: few output tiles over a long K ----------------------------------------------------------
@pytest.mark.parametrize("vec4", [True, False], ids=["vec4", "words"])
@pytest.mark.parametrize("m,k,n,splits", [(17, 512, 33, 2), (65, 2048, 129, None), (255, 768, 1, 3),
                                          (130, 1024, 68, 4)], ids=str)
def test_split_k_matches_torch(device, monkeypatch, tiled_only, vec4, m, k, n, splits):
    """A small grid over a long K: the tiled GEMM over K chunks into scratch, then matmul_split_sum."""
    monkeypatch.setattr(matmul, "FORCE_SPLITS", splits)
    monkeypatch.setattr(matmul, "VEC4", vec4)
    a, w = rand((m, k), seed=m, low=-1, high=1), rand((k, n), seed=n, low=-1, high=1)
    a[1, k - 1] = np.nan  # the last chunk's last column reaches the row
    g = rlxpy.Graph("splitk")
    g.output(g.matmul(g.input("a", (m, k)), g.input("w", (k, n)), name="y"))
    exe = rlxpy.compile(g)
    gemm, total = exe.schedule.steps
    want_splits = splits or matmul.k_splits(m, n, k, 1)
    assert (gemm.kernel, total.kernel) == ("matmul_tiled", "matmul_split_sum")
    assert gemm.grid[2] == want_splits > 1
    assert uses_vec4(gemm) == (vec4 and n % 4 == 0) and fields_of(gemm)["k_len"] == k // want_splits
    got = exe.run({"a": a, "w": w})["y"]
    want = (torch.from_numpy(a).double() @ torch.from_numpy(w).double()).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_close(np.nan_to_num(got), np.nan_to_num(want), 1e-4, 1e-4, what=f"{want_splits} K chunks")


def test_split_k_balances_the_busiest_sms_work_where_k_divides():
    """k_splits' model (132 workgroups at once, 64 k of fixed cost per workgroup), by hand."""
    # 36 tiles of 64x64: 5 rounds of 132 at 16 chunks, 5 x (256 + 64) = 1600 < 8 chunks' 3 x 576
    assert matmul.k_splits(384, 384, 4096, 1) == 16
    # 108 tiles: 8 chunks, 7 x (512 + 64) = 4032 < 1 chunk's 4160 < 2 chunks' 2 x 2112
    assert matmul.k_splits(384, 1152, 4096, 1) == 8
    assert matmul.k_splits(1536, 384, 4096, 1) == 8, "144 tiles: 9 x 576 against 18 x 320 at 16"
    assert matmul.k_splits(4096, 1152, 384, 1) == 1, "576 tiles of 128x64: K whole"
    assert matmul.k_splits(512, 576, 576, 1) == 3, "72 tiles: 2 x 256 against 1 x 640"
    assert matmul.k_splits(384, 384, 4096, 2) == 1, "batched GEMMs keep K whole"
    assert matmul.k_splits(40, 5, 3001, 1) == 1, "no equal chunks of 8-multiples"
    assert matmul.k_splits(40, 5, 400, 1) == 5, "one workgroup: 5 chunks of 80"
    assert matmul.k_splits(40, 5, 96, 1) == 1, "chunks of at least 64"


# -- SplitMatMul: the split store of both kernels ----------------------------------------------------
@pytest.mark.parametrize("rows,k,widths", [(3, 19, (3, 5, 7)), (3, 20, (64, 32, 36)), (130, 20, (64, 32, 36)),
                                           (130, 19, (3, 5, 7)), (70, 8, (4, 8))], ids=str)
def test_split_store_matches_the_unsplit_gemm_bit_for_bit(device, rows, k, widths):
    n = sum(widths)
    g = rlxpy.Graph("split")
    y = g.linear(g.input("x", [rows, k]), g.param("w", [k, n]), g.param("b", [n]), "relu", name="y")
    starts = np.cumsum((0, *widths[:-1]))
    g.output(*(g.narrow(y, 1, int(s), w, name=f"part{i}") for i, (s, w) in enumerate(zip(starts, widths))))
    rng = np.random.default_rng(rows + k)
    params = {"w": rng.standard_normal((k, n)).astype(np.float32),
              "b": rng.standard_normal(n).astype(np.float32)}
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    runs = {}
    for patterns in (1, 0):
        with env.override(RLX_WGPU_NO_PATTERNS=1 - patterns):
            exe = rlxpy.compile(g)
        for name, value in params.items():
            exe.set_param(name, value)
        runs[patterns] = exe.run(feeds)
        if patterns:
            assert ops.SplitMatMul in {type(node.op) for node in exe.schedule.graph.nodes}
            gemms = [s for s in exe.schedule.steps if s.kernel.startswith("matmul_")]
            assert [s.kernel for s in gemms] == ["matmul_" + ("skinny" if rows <= SKINNY_ROWS else "tiled")]
            aligned = k % 4 == 0 and all(w % 4 == 0 for w in widths)
            assert gemms[0].kernel == "matmul_skinny" or uses_vec4(gemms[0]) == aligned
    full = np.maximum(feeds["x"].astype(np.float64) @ params["w"] + params["b"], 0)
    for i, (s, w) in enumerate(zip(starts, widths)):
        np.testing.assert_array_equal(runs[1][f"part{i}"], runs[0][f"part{i}"])
        assert_close(runs[1][f"part{i}"], full[:, s:s + w], *TOL["matmul"], what=f"part {i}")


# -- active extent -----------------------------------------------------------------------------------
@pytest.mark.parametrize("rows,actual,kernel", [(200, 70, "matmul_tiled"), (200, 1, "matmul_tiled"),
                                                (SKINNY_ROWS, 3, "matmul_skinny")])
def test_active_extent_runs_the_first_rows(device, rows, actual, kernel):
    k, n = 36, 132
    g = rlxpy.Graph("extent")
    g.output(g.linear(g.input("x", (rows, k)), g.param("w", (k, n)), g.param("b", (n,)), "relu", name="y"))
    exe = rlxpy.compile(g)
    assert kernels_of(exe) == [kernel]
    w, b, x = rand((k, n), 1), rand((n,), 2), rand((rows, k), 3)
    exe.set_param("w", w)
    exe.set_param("b", b)
    full_grid = exe.encoder.grids[0]
    assert exe.set_active_extent((actual, rows)) == 1
    try:
        assert exe.encoder.grids[0][1] <= full_grid[1] and fields_of(exe.schedule.steps[0])["m"] == rows
        got = exe.run({"x": x})["y"]
    finally:
        exe.set_active_extent(None)
    assert_close(got[:actual], np.maximum(x[:actual].astype(np.float64) @ w + b, 0), *TOL["matmul"])


# -- NaN / inf, errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["auto", "tiled"])
def test_nan_and_inf_propagate_like_torch(device, monkeypatch, route):
    if route == "tiled":
        monkeypatch.setattr(matmul_skinny, "SKINNY_F32", False)
    a, w = rand((5, 19), 7), rand((19, 7), 8)
    a[1, 3] = np.nan
    a[2, 0] = np.inf
    w[4, 6] = -np.inf
    got = check_op(lambda g, x, y: g.matmul(x, y, name="mm"), [a, w], torch.matmul, tol="matmul")["mm"]
    want = torch.matmul(torch.from_numpy(a), torch.from_numpy(w)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isnan(got[1]).all()


def test_matmul_of_f16_is_a_clear_error(device):
    g = rlxpy.Graph("bad")
    g.output(g.matmul(g.input("a", (3, 4), DType.F16), g.input("w", (4, 5), DType.F16), name="proj"))
    with pytest.raises(UnsupportedOpError, match=r"proj \(MatMul\): matmul_tiled is lowered for f32 only"):
        rlxpy.compile(g)


def test_matmul_shape_errors_name_the_node():
    g = rlxpy.Graph("bad")
    with pytest.raises(GraphError, match=r"proj \(MatMul\).*inner dims differ"):
        g.matmul(g.input("a", (3, 4)), g.input("w", (5, 6)), name="proj")
    with pytest.raises(GraphError, match=r"bmm \(MatMul\).*identical leading dims"):
        g.matmul(g.input("b", (2, 3, 4)), g.input("v", (3, 4, 6)), name="bmm")
    with pytest.raises(GraphError, match=r"lin \(FusedMatMulBiasAct\).*bias must be"):
        g.linear(g.input("x", (3, 4)), g.input("u", (4, 6)), g.input("c", (5,)), name="lin")


def test_batch_past_the_grid_limit_is_a_clear_error():
    g = rlxpy.Graph("bad")
    g.output(g.matmul(g.input("a", (65536, 1, 2)), g.input("w", (65536, 2, 1)), name="many"))
    with pytest.raises(UnsupportedOpError, match=r"many \(MatMul\).*batch 65536"):
        lower_graph(prepare(g), DeviceFacts())


def test_long_k_rounding_of_the_tiled_kernel_is_no_worse_than_torch_f32(device, monkeypatch):
    """Unsplit over K = 1536 (as a Mamba projection runs), the tiled kernel's f32 error (rms, relative
    to float64) stays within 1.5x of torch's f32 matmul: each K step is summed on its own first
    (one running sum per output measured 2.7x)."""
    monkeypatch.setattr(matmul, "FORCE_SPLITS", 1)
    r = np.random.default_rng(7)
    x = r.standard_normal((130, 1536)).astype(np.float32)
    w = (r.standard_normal((1536, 70)) / np.sqrt(1536)).astype(np.float32)
    g = rlxpy.Graph("long_k")
    g.output(g.matmul(g.input("x", list(x.shape)), g.param("w", list(w.shape)), name="y"))
    exe = rlxpy.compile(g)
    assert [s.kernel for s in exe.schedule.steps] == ["matmul_tiled"]
    exe.set_param("w", w)
    got = exe.run({"x": x})["y"]
    want = x.astype(np.float64) @ w.astype(np.float64)
    ours = (torch.from_numpy(x) @ torch.from_numpy(w)).numpy()

    def rms(a: np.ndarray) -> float:
        return float(np.sqrt(((a.astype(np.float64) - want) ** 2).mean() / (want ** 2).mean()))

    assert rms(got) <= 1.5 * rms(ours), (rms(got), rms(ours))


@pytest.mark.parametrize("checked", [0, 1], ids=["unchecked", "checked"])
def test_the_gemm_runs_without_runtime_checks_unless_asked(device, monkeypatch, tiled_only, checked):
    """matmul_tiled is compiled without WGSL's index clamps (its indices are in range by construction);
    RLX_WGPU_CHECKED_SHADERS puts them back. The same product either way, against torch."""
    from rlxpy.wgpu_backend import device as device_module

    compiled = []
    real = device_module.unchecked_module
    monkeypatch.setattr(device_module, "unchecked_module", lambda *a: compiled.append(a[1]) or real(*a))
    monkeypatch.setattr(device, "_pipelines", {})  # compile afresh: an earlier test may share the WGSL
    a, w = rand((255, 17), seed=3), rand((17, 131), seed=4)
    with env.override(RLX_WGPU_CHECKED_SHADERS=checked):
        g = rlxpy.Graph(f"checks{checked}")
        g.output(g.matmul(g.input("a", a.shape), g.input("w", w.shape), name="y"))
        got = rlxpy.compile(g).run({"a": a, "w": w})["y"]
    assert [label.split(":")[0] for label in compiled] == ([] if checked else ["matmul_tiled"])
    assert_close(got, a.astype(np.float64) @ w, *TOL["matmul"])

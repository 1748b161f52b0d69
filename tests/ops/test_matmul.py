"""The tiled f32 GEMM (matmul_tiled) against torch.matmul: 2-D, [..,M,K]x[K,N], batched [L..,M,K]x[L..,K,N],
and FusedMatMulBiasAct with every activation; sizes around the 64x64 tile and its 16-wide K step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import TOL, check_op, rand

import rlxpy
from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.core import ActKind
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.kernels.params import KERNELS
from rlxpy.wgpu_backend.schedule import DeviceFacts

F = torch.nn.functional

# (M, K, N): 1, 3, 17, 63, 64, 65, 255 on every side; K off the 16-wide step except where stated
SIZES = [(1, 1, 1), (3, 17, 5), (1, 255, 3), (17, 33, 65), (63, 64, 65), (64, 16, 64), (65, 65, 63),
         (255, 17, 255), (255, 255, 1), (3, 255, 64), (64, 63, 17), (65, 1, 65), (17, 3, 255),
         (255, 255, 255)]


def steps_of(exe) -> list[str]:
    return [step.kernel for step in exe.schedule.steps]


def tiled_fields(exe) -> dict[str, int]:
    (step,) = exe.schedule.steps
    return KERNELS["matmul_tiled"].params.unpack(step.uniforms)


@pytest.mark.parametrize("m,k,n", SIZES, ids=str)
def test_matmul_2d_matches_torch(device, m, k, n):
    a, w = rand((m, k), seed=m), rand((k, n), seed=n + 1)
    check_op(lambda g, x, y: g.matmul(x, y), [a, w], torch.matmul, tol="matmul")


def test_matmul_schedule_is_one_tiled_dispatch(device):
    g = rlxpy.Graph("mm")
    out = g.matmul(g.input("a", (65, 33)), g.input("w", (33, 129)))
    g.output(out)
    exe = rlxpy.compile(g)
    assert steps_of(exe) == ["matmul_tiled"]
    assert exe.schedule.steps[0].grid == (3, 2, 1), "ceil(129/64) column tiles, ceil(65/64) row tiles"
    fields = tiled_fields(exe)
    assert (fields["m"], fields["k"], fields["n"], fields["has_bias"]) == (65, 33, 129, 0)


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
    fields = tiled_fields(exe)
    assert fields["m"] == math.prod(a_shape[:-1]) and fields["stride_a"] == 0, "rows of all leading dims"


@pytest.mark.parametrize("a_shape,w_shape", [((3, 17, 33), (3, 33, 65)), ((2, 2, 65, 31), (2, 2, 31, 3)),
                                             ((1, 64, 64), (1, 64, 64)), ((7, 1, 1), (7, 1, 1)),
                                             ((2, 63, 255), (2, 255, 17))], ids=str)
def test_batched_matmul_matches_torch(device, a_shape, w_shape):
    a, w = rand(a_shape, seed=3), rand(w_shape, seed=4)
    check_op(lambda g, x, y: g.matmul(x, y), [a, w], torch.matmul, tol="matmul")


def test_batched_strides_and_grid(device):
    g = rlxpy.Graph("bmm")
    g.output(g.matmul(g.input("a", (2, 3, 17, 33)), g.input("w", (2, 3, 33, 65))))
    (step,) = lower_graph(prepare(g), DeviceFacts()).steps
    fields = KERNELS["matmul_tiled"].params.unpack(step.uniforms)
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


@pytest.mark.parametrize("act", [None, *ActKind], ids=lambda a: a.name if a else "NONE")
def test_fused_matmul_bias_act_matches_torch(device, act):
    x, w, bias = fused_operands(act, 17, 33, 65)
    out = check_op(lambda g, a, b, c: g.linear(a, b, c, act, name="fused"), [x, w, bias],
                   lambda a, b, c: EPILOGUES[act](a @ b + c), tol="matmul")["fused"]
    assert np.isfinite(out).all(), "the operands were chosen to keep every epilogue finite"


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (65, 255, 63), (255, 17, 3)], ids=str)
def test_fused_matmul_with_leading_dims_and_edge_sizes(device, m, k, n):
    x, w, bias = rand((2, m, k), 4), rand((k, n), 5), rand((n,), 6)
    check_op(lambda g, a, b, c: g.linear(a, b, c, "gelu"), [x, w, bias], lambda a, b, c: F.gelu(a @ b + c),
             tol="matmul")


def test_fused_schedule_sets_the_bias(device):
    g = rlxpy.Graph("fused")
    g.output(g.linear(g.input("x", (5, 7)), g.param("w", (7, 9)), g.param("b", (9,)), "silu"))
    (step,) = lower_graph(prepare(g), DeviceFacts()).steps
    fields = KERNELS["matmul_tiled"].params.unpack(step.uniforms)
    assert step.kernel == "matmul_tiled" and fields["has_bias"] == 1
    assert "v / (1.0 + exp(-v))" in step.source, "the activation is fused into the epilogue"


# -- NaN / inf, errors ---------------------------------------------------------------------------
def test_nan_and_inf_propagate_like_torch(device):
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
    with pytest.raises(UnsupportedOpError, match=r"proj \(MatMul\).*f32 matmul only"):
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

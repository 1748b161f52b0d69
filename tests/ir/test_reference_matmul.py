"""The numpy reference of the matmul family against torch: MatMul, FusedMatMulBiasAct,
GroupedMatMul."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reference_helpers import close_loose as close
from reference_helpers import rand_plain as rand
from reference_helpers import run, t

from rlxpy.ir.ops import ActKind

# -- matmuls ---------------------------------------------------------------------------------------
MATMUL_SHAPES = [((1, 1), (1, 1)), ((3, 17), (17, 5)), ((255, 33), (33, 17)), ((17, 255), (255, 3)),
                 ((2, 3, 17), (17, 5)), ((1, 255, 3), (3, 1)),  # [..., M, K] x [K, N]
                 ((2, 3, 17, 5), (2, 3, 5, 4)), ((3, 1, 7), (3, 7, 255))]  # batched


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES, ids=str)
def test_matmul_matches_torch(a_shape, b_shape):
    a, b = rand(a_shape, 1), rand(b_shape, 2)
    close(run(lambda g, x, y: g.matmul(x, y), a=a, b=b), torch.matmul(t(a).double(), t(b).double()))


def test_matmul_propagates_nan_and_inf():
    a = rand((3, 17), 3)
    a[0, 4], a[1, 0] = np.nan, np.inf
    b = np.abs(rand((17, 5), 4))
    close(run(lambda g, x, y: g.matmul(x, y), a=a, b=b), torch.matmul(t(a), t(b)))


ACTS = {
    None: lambda x: x, ActKind.RELU: torch.relu, ActKind.SIGMOID: torch.sigmoid, ActKind.TANH: torch.tanh,
    ActKind.EXP: torch.exp, ActKind.LOG: torch.log, ActKind.SQRT: torch.sqrt, ActKind.RSQRT: torch.rsqrt,
    ActKind.NEG: torch.neg, ActKind.ABS: torch.abs, ActKind.GELU: F.gelu, ActKind.SILU: F.silu,
    ActKind.GELU_APPROX: lambda x: F.gelu(x, approximate="tanh"),
    ActKind.ROUND: lambda x: torch.sign(x) * torch.floor(torch.abs(x) + 0.5),
    ActKind.SIN: torch.sin, ActKind.COS: torch.cos, ActKind.TAN: torch.tan, ActKind.ATAN: torch.atan,
    ActKind.HARDSIGMOID: F.hardsigmoid, ActKind.HARDSWISH: F.hardswish,
}


@pytest.mark.parametrize("x_shape", [(17, 33), (2, 3, 33)], ids=str)
@pytest.mark.parametrize("act", list(ACTS), ids=lambda k: k.name if k is not None else "none")
def test_fused_matmul_bias_act_honours_every_activation(act, x_shape):
    assert set(ACTS) - {None} == set(ActKind)
    x, w, bias = rand(x_shape, 5), rand((33, 5), 6, 0.3), rand((5,), 7)
    out = run(lambda g, a, b, c: g.linear(a, b, c, act), x=x, w=w, bias=bias)
    # the pre-activation is an f32 tensor (as in a kernel epilogue), so round it before act
    pre = (torch.matmul(t(x).double(), t(w).double()) + t(bias).double()).float().double()
    close(out, ACTS[act](pre).float())


@pytest.mark.parametrize("idx_dtype", [np.int32, np.float32])
def test_grouped_matmul_matches_per_row_torch_and_zeroes_bad_experts(idx_dtype):
    x, w = rand((17, 33), 8), rand((3, 33, 5), 9)
    idx = np.array([0, 1, 2, 2, 1, 0, -1, 3, 7, 1, 0, 2, 2, 2, 1, 0, 1], dtype=idx_dtype)
    if idx_dtype is np.float32:
        idx = idx + np.float32(0.5) * (idx >= 0)  # fractional ids truncate
    out = run(lambda g, a, b, c: g.grouped_matmul(a, b, c), x=x, w=w, idx=idx)
    experts = torch.from_numpy(np.trunc(idx).astype(np.int64))
    valid = (experts >= 0) & (experts < 3)
    gathered = t(w).double()[experts.clamp(0, 2)]  # [M, K, N]
    expected = torch.einsum("mk,mkn->mn", t(x).double(), gathered) * valid[:, None]
    close(out, expected)
    assert not out[6].any() and not out[7].any() and not out[8].any()

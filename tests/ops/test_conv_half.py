"""f16 / bf16 Conv, ConvTranspose, Pool, AdaptivePool and Im2Col on the GPU vs torch (float64 on the
same half values, then rounded to the half dtype by torch's ``.to()``).

The kernels sum in f32 and round once (lowering/conv_half.py), torch's float64 oracle rounds once
from an exact-enough sum: the two may differ by one unit in the last place of the half result, so
the tolerance is one ulp relative (2^-10 for f16, 2^-7 for bf16) plus 1e-6 absolute for sums that
cancel to almost 0 (f32 rounding there is far below a half's resolution of O(1) values). Max pooling
and im2col move values and compare exactly. No schedule may hold a host step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.wgpu_backend.lowering import conv_gemm

HALF = {DType.F16: torch.float16, DType.BF16: torch.bfloat16}
ULP = {DType.F16: 2.0**-10, DType.BF16: 2.0**-7}


def _values(shape, seed: int, dtype: DType, scale: float = 1.0) -> np.ndarray:
    """Values exactly representable in ``dtype``: f16 as numpy float16, bf16 as float32 words."""
    t = torch.from_numpy(np.random.default_rng(seed).uniform(-1, 1, shape) * scale).to(HALF[dtype])
    return t.numpy() if dtype is DType.F16 else t.float().numpy()


def _run(build, arrays, dtype: DType):
    g = rlxpy.Graph("half")
    nodes = [g.input(f"x{i}", a.shape, dtype) for i, a in enumerate(arrays)]
    out = build(g, *nodes)
    g.output(out)
    exe = rlxpy.compile(g)
    steps = [(s.kind, s.kernel) for s in exe.schedule.steps]
    assert all(kind == "gpu" for kind, _ in steps), steps
    got = exe.run({f"x{i}": a for i, a in enumerate(arrays)})[out.name]
    return np.asarray(got, np.float64), [k for _, k in steps]


def _oracle(fn, arrays, dtype: DType) -> np.ndarray:
    want = fn(*[torch.from_numpy(np.asarray(a, np.float64)) for a in arrays])
    return want.to(HALF[dtype]).double().numpy()


def _close(got: np.ndarray, want: np.ndarray, dtype: DType, exact: bool = False) -> None:
    rtol, atol = (0.0, 0.0) if exact else (ULP[dtype], 1e-6)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


#: (batch, c_in, c_out, spatial, kernel, stride, padding, groups, act): the implicit GEMM (2-D, 1-D,
#: 3-D), the direct kernel (depthwise), odd sizes everywhere
CONVS = [
    (3, 17, 33, (13, 11), (3, 3), 2, 1, 1, "relu"),
    (1, 17, 17, (31, 5), (3, 3), 1, 1, 17, None),
    (3, 3, 17, (31,), (5,), 2, 2, 1, "gelu"),
    (1, 3, 17, (5, 5, 5), (3, 3, 3), 1, 1, 1, None),
]
TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{len(c[3])}d-{c[1]}x{c[2]}-g{c[7]}")
def test_half_conv_runs_on_the_gpu_like_torch(device, case, dtype):
    batch, c_in, c_out, spatial, kernel, stride, pad, groups, act = case
    fan_in = c_in // groups * math.prod(kernel)
    x = _values((batch, c_in) + spatial, 0, dtype)
    w = _values((c_out, c_in // groups) + kernel, 1, dtype, 1 / math.sqrt(fan_in))
    b = _values((c_out,), 2, dtype)
    got, steps = _run(lambda g, x, w, b: g.conv(x, w, stride, pad, 1, groups, bias=b, activation=act),
                      [x, w, b], dtype)
    acts = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu}
    want = _oracle(lambda x, w, b: acts[act](TORCH_CONV[len(kernel)](x, w, b, stride, pad, 1, groups)),
                   [x, w, b], dtype)
    _close(got, want, dtype)
    assert steps.count("elementwise_cast_half") == 4  # x, w, bias widened; y narrowed
    assert ("conv_direct" if groups == c_in else "conv_gemm") in steps


def test_half_conv_with_a_k_split_and_a_transposed_conv(device, monkeypatch):
    dtype = DType.F16
    monkeypatch.setattr(conv_gemm, "FORCE_SPLITS", 3)
    x = _values((2, 24, 9, 7), 3, dtype)
    w = _values((40, 24, 3, 3), 4, dtype, 1 / math.sqrt(216))
    got, steps = _run(lambda g, x, w: g.conv(x, w, 1, 1), [x, w], dtype)
    _close(got, _oracle(lambda x, w: F.conv2d(x, w, None, 1, 1), [x, w], dtype), dtype)
    assert "conv_split_sum" in steps
    wt = _values((24, 5, 3, 3), 5, dtype, 1 / math.sqrt(216))
    got, steps = _run(lambda g, x, w: g.conv_transpose(x, w, 2, 1, 1), [x, wt], dtype)
    _close(got, _oracle(lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1), [x, wt], dtype), dtype)


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16], ids=["f16", "bf16"])
def test_half_pools_and_im2col_run_on_the_gpu_like_torch(device, dtype):
    x = _values((2, 17, 31, 5), 6, dtype, 4.0)
    got, steps = _run(lambda g, x: g.pool(x, "max", 3, 2, 1, ceil_mode=True), [x], dtype)
    _close(got, _oracle(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), [x], dtype), dtype, exact=True)
    assert "conv_pool" in steps
    got, _ = _run(lambda g, x: g.pool(x, "mean", 3, 2, 1, count_include_pad=False), [x], dtype)
    _close(got, _oracle(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [x], dtype), dtype)
    wide = _values((3, 5, 1, 1023), 7, dtype)  # a window of 1023 taps: one workgroup per output
    got, steps = _run(lambda g, x: g.adaptive_pool(x, "mean", (1, 1)), [wide], dtype)
    _close(got, _oracle(lambda x: F.adaptive_avg_pool2d(x, 1), [wide], dtype), dtype)
    assert "conv_pool_rows" in steps
    got, _ = _run(lambda g, x: g.im2col(x, 3, 2, 1), [x], dtype)
    want = _oracle(lambda x: F.unfold(x, 3, 1, 1, 2).transpose(1, 2).reshape(-1, 17 * 9), [x], dtype)
    _close(got, want, dtype, exact=True)

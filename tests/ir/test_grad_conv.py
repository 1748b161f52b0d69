"""Gradient rules of the conv family (Conv, ConvTranspose, Pool, AdaptivePool, Im2Col) vs
torch.autograd in float64 (grad_helpers.F32_TOL: rtol 1e-4, atol 1e-5 for the f32 graph) and central
differences of the float64 reference (FD_TOL: rtol 1e-5, atol 1e-6), on odd shapes: batch 1/2/3,
channels 1/3/5, sizes 1/3/17, stride 2, dilation 2, groups 2 and depthwise, asymmetric padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from grad_helpers import check_grads, rand

from rlxpy.errors import UnsupportedOpError
from rlxpy.ir import Graph
from rlxpy.ir.passes.autodiff import grad

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _torch_pad(x, begin, end):
    """torch's conv pads symmetrically only: asymmetric padding as an explicit F.pad first."""
    widths = []
    for b, e in zip(reversed(begin), reversed(end)):
        widths += [b, e]
    return F.pad(x, widths)


# (batch, c_in, c_out, spatial sizes, kernel, stride, padding, padding_end, dilation, groups, bias, act)
CONV_CASES = [
    (1, 1, 1, (1,), (1,), 1, (0,), (0,), 1, 1, False, None),
    (2, 3, 5, (17,), (3,), 2, (1,), (2,), 2, 1, True, None),
    (1, 4, 6, (9, 7), (3, 2), (2, 1), (1, 0), (0, 2), (1, 2), 2, True, None),
    (3, 5, 5, (6, 5), (3, 3), 1, (1, 1), (1, 1), 1, 5, False, None),  # depthwise
    (2, 3, 5, (17, 3), (3, 3), 2, (2, 1), (0, 1), 1, 1, True, "relu"),
    (1, 2, 4, (4, 5, 3), (2, 3, 1), (1, 2, 1), (0, 1, 0), (1, 0, 0), (2, 1, 1), 2, True, None),
    (2, 3, 3, (5,), (4,), 3, (0,), (0,), 1, 3, True, "silu"),  # the end of the input unread
]


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv_gradients(case):
    batch, c_in, c_out, sizes, kernel, stride, begin, end, dilation, groups, bias, act = case
    spatial = len(sizes)
    arrays = {"x": rand((batch, c_in) + sizes, 0), "w": rand((c_out, c_in // groups) + kernel, 1, 0.5)}
    if bias:
        arrays["b"] = rand((c_out,), 2)

    def build(g, x, w, b=None):
        return g.conv(x, w, stride, begin, dilation, groups, bias=b, activation=act, padding_end=end)

    def reference(x, w, b=None):
        y = _CONV[spatial](_torch_pad(x, begin, end), w, b, stride, 0, dilation, groups)
        return {None: lambda t: t, "relu": F.relu, "silu": F.silu}[act](y)

    check_grads(build, reference, arrays)


# (batch, c_in, c_out/groups, sizes, kernel, stride, padding, padding_end, output_padding, dilation, groups)
CONV_T_CASES = [
    (1, 1, 1, (1,), (1,), 1, (0,), (0,), 0, 1, 1),
    (2, 3, 5, (17,), (3,), 2, (1,), (1,), 1, 2, 1),
    (1, 4, 3, (5, 3), (3, 2), (2, 1), (1, 0), (1, 0), (1, 0), (1, 2), 2),
    (2, 5, 1, (3, 6), (3, 3), 2, (1, 1), (1, 1), 0, 1, 5),  # depthwise
    (1, 2, 2, (3, 4, 2), (2, 3, 2), (2, 1, 1), (0, 1, 0), (0, 1, 0), (1, 0, 0), (1, 1, 2), 2),
]


@pytest.mark.parametrize("case", CONV_T_CASES, ids=str)
def test_conv_transpose_gradients(case):
    batch, c_in, c_out_g, sizes, kernel, stride, begin, end, extra, dilation, groups = case
    spatial = len(sizes)
    arrays = {"x": rand((batch, c_in) + sizes, 0), "w": rand((c_in, c_out_g) + kernel, 1, 0.5),
              "b": rand((c_out_g * groups,), 2)}

    def build(g, x, w, b):
        return g.conv_transpose(x, w, stride, begin, extra, dilation, groups, bias=b, padding_end=end)

    def reference(x, w, b):
        return _CONV_T[spatial](x, w, b, stride, begin, extra, groups, dilation)

    check_grads(build, reference, arrays)


def test_conv_transpose_asymmetric_padding():
    """padding_end != padding: torch's output cut at the end by the difference."""
    arrays = {"x": rand((2, 3, 7), 0), "w": rand((3, 2, 3), 1, 0.5)}

    def build(g, x, w):
        return g.conv_transpose(x, w, 2, 1, 0, 1, 1, padding_end=2)

    def reference(x, w):
        return F.conv_transpose1d(x, w, None, 2, 1)[..., :-1]

    check_grads(build, reference, arrays)


def _pool_inputs(shape, seed=0):
    """Distinct values (no ties, so the max's winner is unambiguous)."""
    values = np.random.default_rng(seed).permutation(int(np.prod(shape))).astype(np.float32)
    return {"x": (values.reshape(shape) / values.size - 0.5).astype(np.float32)}


# (shape, kernel, stride, padding, dilation, ceil_mode)
MAX_CASES = [
    ((1, 1, 1), 1, 1, 0, 1, False),
    ((2, 3, 17), 3, 2, 1, 2, True),
    ((1, 5, 17, 3), (3, 2), (2, 1), (1, 0), 1, False),
    ((2, 3, 7, 9), 3, 2, 1, (2, 1), True),
    ((1, 2, 5, 4, 3), 2, 2, 0, 1, True),
    ((1, 3, 6, 6), 3, 1, 1, 1, False),  # overlapping windows: an element wins several
]


@pytest.mark.parametrize("case", MAX_CASES, ids=str)
def test_max_pool_gradients(case):
    shape, kernel, stride, padding, dilation, ceil_mode = case
    fn = {3: F.max_pool1d, 4: F.max_pool2d, 5: F.max_pool3d}[len(shape)]
    check_grads(lambda g, x: g.max_pool(x, kernel, stride, padding, dilation=dilation, ceil_mode=ceil_mode),
                lambda x: fn(x, kernel, stride, padding, dilation, ceil_mode), _pool_inputs(shape))


def test_max_pool_tie_goes_to_the_first_tap():
    x = np.zeros((1, 1, 4), np.float32)
    check_grads(lambda g, x: g.max_pool(x, 2, 1), lambda x: F.max_pool1d(x, 2, 1), {"x": x}, fd=False)


# (shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_CASES = [
    ((1, 1, 1), 1, 1, 0, False, True, None),
    ((2, 3, 17), 3, 2, 1, True, True, None),
    ((2, 3, 17), 3, 2, 1, True, False, None),
    ((1, 5, 17, 3), (3, 2), (2, 1), (1, 1), False, False, None),
    ((2, 1, 7, 8), 3, 2, 1, True, True, 5),
    ((1, 2, 5, 4, 3), 2, 2, 1, True, False, None),
]


@pytest.mark.parametrize("case", AVG_CASES, ids=str)
def test_avg_pool_gradients(case):
    shape, kernel, stride, padding, ceil_mode, include, divisor = case
    fn = {3: F.avg_pool1d, 4: F.avg_pool2d, 5: F.avg_pool3d}[len(shape)]
    extra = {} if len(shape) == 3 else {"divisor_override": divisor}
    if len(shape) == 3:
        assert divisor is None

    def build(g, x):
        return g.avg_pool(x, kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=include,
                          divisor_override=divisor)

    check_grads(build, lambda x: fn(x, kernel, stride, padding, ceil_mode, include, **extra),
                {"x": rand(shape, 3)})


def test_sum_pool_asymmetric_padding():
    def build(g, x):
        return g.pool(x, "sum", 3, 2, 1, padding_end=0)

    def reference(x):
        return F.avg_pool2d(F.pad(x, (1, 0, 1, 0)), 3, 2) * 9

    check_grads(build, reference, {"x": rand((2, 3, 8, 7), 4)})


# (shape, output_size, kind)
ADAPTIVE_CASES = [
    ((2, 3, 17), 5, "mean"), ((1, 5, 17, 3), (4, 5), "mean"), ((2, 3, 4, 5, 3), (2, 3, 2), "mean"),
    ((2, 3, 17), 5, "max"), ((1, 5, 7, 3), (3, 5), "max"), ((2, 1, 4, 5, 3), (3, 2, 1), "max"),
    ((3, 5, 7, 9), 1, "mean"), ((3, 5, 7, 9), 1, "max"),  # global pooling
]


@pytest.mark.parametrize("case", ADAPTIVE_CASES, ids=str)
def test_adaptive_pool_gradients(case):
    shape, size, kind = case
    spatial = len(shape) - 2
    name = "adaptive_avg_pool" if kind == "mean" else "adaptive_max_pool"
    fn = getattr(F, f"{name}{spatial}d")
    check_grads(lambda g, x: g.adaptive_pool(x, kind, size), lambda x: fn(x, size), _pool_inputs(shape, 5))


@pytest.mark.parametrize("case", [((1, 1, 3, 3), 1, 1, 0, 1), ((2, 3, 7, 5), (3, 2), (2, 1), (1, 0), (1, 2))],
                         ids=str)
def test_im2col_gradients(case):
    shape, kernel, stride, padding, dilation = case

    def reference(x):
        cols = F.unfold(x, kernel, dilation, padding, stride)  # [N, C*k, L]
        return cols.transpose(1, 2).reshape(-1, cols.shape[1])

    check_grads(lambda g, x: g.im2col(x, kernel, stride, padding, dilation), reference, {"x": rand(shape, 6)})


def test_product_pool_is_refused_naming_the_node():
    g = Graph("prod_pool")
    x = g.input("x", (1, 2, 4))
    y = g.pool(x, "prod", 2, 2, name="product")
    g.output(g.sum(g.reshape(y, (4,)), 0, name="loss"))
    with pytest.raises(UnsupportedOpError, match="product"):
        grad(g, "loss", ["x"])


def test_conv_torch_oracle_is_independent():
    """The asymmetric-padding oracle itself: F.pad + conv equals torch's own symmetric conv."""
    x = torch.randn(1, 2, 9, dtype=torch.float64)
    w = torch.randn(3, 2, 3, dtype=torch.float64)
    assert torch.allclose(F.conv1d(_torch_pad(x, (1,), (1,)), w), F.conv1d(x, w, padding=1))

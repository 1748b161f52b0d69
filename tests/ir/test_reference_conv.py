"""Conv, ConvTranspose, Pool, AdaptivePool and Im2Col: shape rules, builder and reference vs
torch.nn.functional."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conv_oracles import zero_stuffed_conv_transpose

from rlxpy.errors import GraphError
from rlxpy.ir.graph import Graph
from rlxpy.ir.ops.base import ReduceOp
from rlxpy.ir.ops.conv import Conv, Pool
from rlxpy.ir.reference import run_reference


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run(g: Graph, node, **values):
    g.output(node)
    return run_reference(g, values)[node.name]


def _close(actual, expected, tol=1e-5):
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol, equal_nan=True)


TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_CASES = [
    # (x shape, c_out, kernel, stride, padding, dilation, groups)
    ((1, 1, 1), 1, (1,), 1, 0, 1, 1),
    ((2, 3, 17), 4, (3,), 2, 1, 1, 1),
    ((3, 6, 255), 9, (5,), 3, 2, 2, 3),
    ((1, 4, 7, 9), 6, (3, 3), 1, 1, 1, 2),
    ((2, 3, 17, 5), 5, (3, 2), (2, 1), (1, 0), (1, 2), 1),
    ((1, 8, 6, 6), 8, (3, 3), 1, 1, 1, 8),  # depthwise
    ((1, 2, 5, 6, 7), 3, (2, 3, 3), (1, 2, 1), (0, 1, 1), 1, 1),
    ((2, 4, 3, 4, 5), 2, (3, 1, 2), 1, 1, (1, 1, 2), 2),
]


@pytest.mark.parametrize("x_shape, c_out, kernel, stride, padding, dilation, groups", CONV_CASES)
def test_conv_matches_torch(x_shape, c_out, kernel, stride, padding, dilation, groups):
    w_shape = (c_out, x_shape[1] // groups) + kernel
    x, w = _rand(x_shape, 1), _rand(w_shape, 2)
    g = Graph()
    y = g.conv(g.input("x", x_shape), g.param("w", w_shape), stride, padding, dilation, groups)
    g.output(y)
    got = run_reference(g, {"x": x}, {"w": w})[y.name]
    want = TORCH_CONV[len(kernel)](torch.from_numpy(x).double(), torch.from_numpy(w).double(), None, stride,
                                   padding, dilation, groups)
    assert y.shape == tuple(want.shape)
    _close(got, want.float(), 1e-4)


def test_conv_propagates_nan_and_inf_like_torch():
    x, w = _rand((1, 2, 9), 3), _rand((3, 2, 3), 4)
    x[0, 0, 4] = np.nan
    x[0, 1, 0] = np.inf
    g = Graph()
    y = g.conv(g.input("x", x.shape), g.input("w", w.shape), padding=1)
    want = F.conv1d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    _close(_run(g, y, x=x, w=w), want, 1e-5)


def test_conv_shape_errors_name_the_node():
    g = Graph()
    x = g.input("x", (1, 4, 8, 8))
    with pytest.raises(GraphError, match=r"c1 \(Conv\): groups=3 must divide C_in=4"):
        g.conv(x, g.param("w", (6, 1, 3, 3)), groups=3, name="c1")
    with pytest.raises(GraphError, match="needs C_in/groups = 2"):
        g.conv(x, g.param("w2", (6, 3, 3, 3)), groups=2)
    with pytest.raises(GraphError, match="exceeds the padded input 8"):
        g.conv(x, g.param("w3", (2, 4, 9, 1)))
    with pytest.raises(GraphError, match="must have the input's rank"):
        g.conv(x, g.param("w4", (2, 4, 3)))
    with pytest.raises(GraphError, match=r"stride \(1, 1, 1\) has 3 entries"):
        g.apply(Conv((3, 3), stride=(1, 1, 1)), [x, g.param("w5", (2, 4, 3, 3))])
    with pytest.raises(GraphError, match="must be static"):
        g.conv(g.input("xs", (1, 4, "T")), g.param("w6", (2, 4, 3)))
    with pytest.raises(GraphError, match="is not a node"):
        g.conv(x, 999)


def test_conv_accepts_a_symbolic_batch():
    g = Graph()
    y = g.conv(g.input("x", ("B", 2, 10)), g.param("w", (4, 2, 3)), stride=2)
    assert str(y.type) == "f32[B, 4, 4]"


def _pool_oracle(x, kind, kernel, stride, padding):
    """Explicit loops over output positions; padded taps are skipped, mean divides by the volume."""
    spatial = x.ndim - 2
    out_sizes = [(x.shape[2 + i] + 2 * padding[i] - kernel[i]) // stride[i] + 1 for i in range(spatial)]
    out = np.zeros(x.shape[:2] + tuple(out_sizes))
    for pos in itertools.product(*(range(o) for o in out_sizes)):
        taps = []
        for tap in itertools.product(*(range(k) for k in kernel)):
            src = [pos[i] * stride[i] + tap[i] - padding[i] for i in range(spatial)]
            if all(0 <= s < x.shape[2 + i] for i, s in enumerate(src)):
                taps.append(x[(slice(None), slice(None)) + tuple(src)].astype(np.float64))
        stack = np.stack(taps, axis=-1)
        reducer = {ReduceOp.SUM: np.sum, ReduceOp.MAX: np.max, ReduceOp.MIN: np.min, ReduceOp.PROD: np.prod}
        value = stack.sum(-1) / np.prod(kernel) if kind is ReduceOp.MEAN else reducer[kind](stack, axis=-1)
        out[(slice(None), slice(None)) + pos] = value
    return out


POOL_CASES = [
    ((1, 1, 1), (1,), (1,), (0,)),
    ((2, 3, 17), (3,), (2,), (1,)),
    ((1, 2, 7, 9), (3, 2), (2, 1), (1, 1)),
    ((2, 1, 5, 6, 7), (2, 3, 3), (2, 2, 1), (1, 1, 0)),
]


@pytest.mark.parametrize("kind", list(ReduceOp))
@pytest.mark.parametrize("shape, kernel, stride, padding", POOL_CASES)
def test_pool_matches_loops(kind, shape, kernel, stride, padding):
    x = _rand(shape, 5) * 0.9
    g = Graph()
    y = g.pool(g.input("x", shape), kind, kernel, stride, padding)
    _close(_run(g, y, x=x), _pool_oracle(x, kind, kernel, stride, padding), 1e-5)


TORCH_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
TORCH_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


@pytest.mark.parametrize("shape, kernel, stride, padding", POOL_CASES)
def test_max_and_mean_pool_match_torch(shape, kernel, stride, padding):
    x = _rand(shape, 6)
    x.reshape(-1)[::7] = -np.inf  # padded taps must never beat -inf values (torch pads with -inf)
    spatial = len(kernel)
    g = Graph()
    xin = g.input("x", shape)
    hi, lo = g.max_pool(xin, kernel, stride, padding), g.pool(xin, "min", kernel, stride, padding)
    avg = g.avg_pool(g.input("x2", shape), kernel, stride, padding)
    g.output(hi, lo, avg)
    x2 = _rand(shape, 7)
    out = run_reference(g, {"x": x, "x2": x2})
    t = torch.from_numpy(x)
    _close(out[hi.name], TORCH_MAX[spatial](t, kernel, stride, padding))
    _close(out[lo.name], -TORCH_MAX[spatial](-t, kernel, stride, padding))
    want_avg = TORCH_AVG[spatial](torch.from_numpy(x2), kernel, stride, padding, count_include_pad=True)
    _close(out[avg.name], want_avg)


def test_max_pool_propagates_nan_like_torch():
    x = _rand((1, 1, 6, 6), 8)
    x[0, 0, 2, 3] = np.nan
    g = Graph()
    y = g.max_pool(g.input("x", x.shape), 2)
    got = _run(g, y, x=x)
    _close(got, F.max_pool2d(torch.from_numpy(x), 2))
    assert np.isnan(got[0, 0, 1, 1]) and np.isnan(got).sum() == 1


def test_pool_stride_defaults_to_one():
    g = Graph()
    y = g.apply(Pool(ReduceOp.SUM, (3,)), [g.input("x", (1, 1, 10))])
    assert y.shape == (1, 1, 8)


def test_pool_shape_errors():
    g = Graph()
    x = g.input("x", (1, 2, 4, 4))
    with pytest.raises(GraphError, match=r"p \(Pool\): pool: window 5 .* exceeds the padded input 4"):
        g.pool(x, "max", 5, name="p")
    with pytest.raises(GraphError, match="pool input must be"):
        g.pool(g.input("v", (4, 4)), "sum", 2)
    with pytest.raises(GraphError, match="needs a float input"):
        g.pool(g.input("i", (1, 1, 4), "i32"), "sum", 2)
    with pytest.raises(GraphError, match="padding"):
        g.pool(x, "sum", 2, padding=-1)


IM2COL_CASES = [
    ((1, 1, 1, 1), (1, 1), 1, 0, 1),
    ((2, 3, 7, 9), (3, 3), 1, 1, 1),
    ((1, 2, 17, 5), (3, 2), (2, 1), (1, 0), (2, 1)),
    ((3, 4, 6, 6), (2, 2), 2, 0, 1),
]


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", IM2COL_CASES)
def test_im2col_matches_torch_unfold(shape, kernel, stride, padding, dilation):
    x = _rand(shape, 9)
    g = Graph()
    y = g.im2col(g.input("x", shape), kernel, stride, padding, dilation)
    cols = F.unfold(torch.from_numpy(x), kernel, dilation, padding, stride)  # [N, C*kh*kw, L]
    want = cols.transpose(1, 2).reshape(-1, cols.shape[1])
    _close(_run(g, y, x=x), want, 0)


def test_im2col_feeds_a_matmul_equal_to_conv():
    x, w = _rand((2, 3, 8, 8), 10), _rand((5, 3, 3, 3), 11)
    g = Graph()
    cols = g.im2col(g.input("x", x.shape), 3, padding=1)
    y = g.matmul(cols, g.param("wt", (27, 5)))
    g.output(y)
    got = run_reference(g, {"x": x}, {"wt": w.reshape(5, 27).T.copy()})[y.name]
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).permute(0, 2, 3, 1).reshape(-1, 5)
    _close(got, want, 1e-4)


def test_im2col_shape_errors():
    g = Graph()
    with pytest.raises(GraphError, match=r"im2col takes x \[N, C, H, W\]"):
        g.im2col(g.input("x", (1, 2, 8)), 3)
    with pytest.raises(GraphError, match="static N and C"):
        g.im2col(g.input("y", ("B", 2, 8, 8)), 3)
    with pytest.raises(GraphError, match="kernel_size"):
        g.im2col(g.input("z", (1, 2, 8, 8)), (3, 3, 3))


# -- bias + activation epilogue, asymmetric padding ---------------------------------------------------
def test_conv_bias_activation_and_asymmetric_padding_match_torch():
    x, w, b = _rand((2, 4, 9, 7), 12), _rand((6, 2, 3, 2), 13), _rand((6,), 14)
    g = Graph()
    y = g.conv(g.input("x", x.shape), g.input("w", w.shape), stride=(2, 1), padding=(1, 0), groups=2,
               bias=g.input("b", b.shape), activation="relu", padding_end=(2, 1))
    tx = F.pad(torch.from_numpy(x).double(), (0, 1, 1, 2))  # (w before, w after, h before, h after)
    tw, tb = torch.from_numpy(w).double(), torch.from_numpy(b).double()
    want = torch.relu(F.conv2d(tx, tw, tb, (2, 1), 0, 1, 2))
    assert y.shape == tuple(want.shape)
    _close(_run(g, y, x=x, w=w, b=b), want.float(), 1e-5)


def test_conv_bias_shape_is_checked():
    g = Graph()
    x = g.input("x", (1, 4, 8))
    with pytest.raises(GraphError, match=r"c \(Conv\): conv bias must be f32\[6\]"):
        g.conv(x, g.param("w", (6, 4, 3)), bias=g.param("b", (4,)), name="c")


# -- ConvTranspose -------------------------------------------------------------------------------------
TORCH_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
CONV_T_CASES = [
    # (x shape, c_out, kernel, stride, padding, output_padding, dilation, groups)
    ((1, 1, 1), 1, (1,), 1, 0, 0, 1, 1),
    ((2, 3, 7), 4, (3,), 2, 1, 1, 1, 1),
    ((1, 4, 5), 6, (4,), 3, 0, 2, 2, 2),
    ((2, 4, 5, 6), 2, (3, 3), 2, 1, 1, 1, 1),
    ((1, 6, 4, 3), 6, (2, 3), (1, 2), (0, 1), (0, 1), (2, 1), 3),
    ((1, 2, 3, 4, 2), 3, (2, 2, 3), (2, 1, 2), (1, 0, 1), 0, 1, 1),
]


@pytest.mark.parametrize("x_shape, c_out, kernel, stride, padding, out_pad, dilation, groups", CONV_T_CASES)
def test_conv_transpose_matches_torch(x_shape, c_out, kernel, stride, padding, out_pad, dilation, groups):
    w_shape = (x_shape[1], c_out // groups) + kernel
    x, w, b = _rand(x_shape, 15), _rand(w_shape, 16), _rand((c_out,), 17)
    g = Graph()
    y = g.conv_transpose(g.input("x", x_shape), g.input("w", w_shape), stride, padding, out_pad, dilation,
                         groups, bias=g.input("b", (c_out,)))
    want = TORCH_CONV_T[len(kernel)](torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                     torch.from_numpy(b).double(), stride, padding, out_pad, groups, dilation)
    assert y.shape == tuple(want.shape)
    _close(_run(g, y, x=x, w=w, b=b), want.float(), 1e-5)


def test_conv_transpose_asymmetric_padding_crops_like_onnx():
    x, w = _rand((1, 2, 5, 4), 18), _rand((2, 3, 3, 3), 19)
    g = Graph()
    y = g.conv_transpose(g.input("x", x.shape), g.input("w", w.shape), stride=2, padding=(0, 1),
                         padding_end=(1, 2))
    full = F.conv_transpose2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=2)
    want = full[:, :, 0:full.shape[2] - 1, 1:full.shape[3] - 2]
    _close(_run(g, y, x=x, w=w), want.float(), 1e-5)


def test_conv_transpose_shape_errors():
    g = Graph()
    x = g.input("x", (1, 4, 5))
    with pytest.raises(GraphError, match=r"t \(ConvTranspose\): conv_transpose weight f32\[3, 2, 3\] needs"):
        g.conv_transpose(x, g.param("w", (3, 2, 3)), name="t")
    with pytest.raises(GraphError, match="groups=3 must divide C_in=4"):
        g.conv_transpose(x, g.param("w2", (4, 2, 3)), groups=3)
    with pytest.raises(GraphError, match="output size -1 < 1"):
        g.conv_transpose(g.input("x1", (1, 4, 1)), g.param("w3", (4, 2, 1)), padding=1)


# -- Pool: ceil_mode, count_include_pad, divisor, dilation, asymmetric padding -----------------------------
POOL_MODE_CASES = [
    # (shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor)
    ((1, 2, 7), (3,), (2,), (1,), True, True, None),
    ((1, 2, 8), (3,), (2,), (1,), True, False, None),
    ((2, 3, 7, 6), (3, 2), (2, 2), (1, 1), True, True, None),
    ((2, 3, 7, 6), (3, 2), (2, 2), (1, 0), True, False, None),
    ((1, 1, 5, 5), (2, 2), (2, 2), (1, 1), False, False, None),
    ((1, 2, 6, 5), (3, 3), (3, 2), (1, 1), True, True, 5),
    ((1, 1, 4, 5, 6), (2, 3, 2), (2, 2, 3), (1, 1, 0), True, False, None),
]


@pytest.mark.parametrize("shape, kernel, stride, padding, ceil, include_pad, divisor", POOL_MODE_CASES)
def test_avg_and_max_pool_modes_match_torch(shape, kernel, stride, padding, ceil, include_pad, divisor):
    x = _rand(shape, 20)
    g = Graph()
    xin = g.input("x", shape)
    avg = g.avg_pool(xin, kernel, stride, padding, ceil_mode=ceil, count_include_pad=include_pad,
                     divisor_override=divisor)
    hi = g.max_pool(xin, kernel, stride, padding, ceil_mode=ceil)
    g.output(avg, hi)
    out = run_reference(g, {"x": x})
    t = torch.from_numpy(x)
    spatial = len(kernel)
    extra = {"divisor_override": divisor} if spatial > 1 else {}  # avg_pool1d has none
    want = TORCH_AVG[spatial](t, kernel, stride, padding, ceil, include_pad, **extra)
    _close(out[avg.name], want)
    _close(out[hi.name], TORCH_MAX[spatial](t, kernel, stride, padding, 1, ceil))


def test_max_pool_dilation_matches_torch():
    x = _rand((2, 3, 11, 9), 21)
    g = Graph()
    y = g.max_pool(g.input("x", x.shape), 3, 2, 1, dilation=(2, 1), ceil_mode=True)
    _close(_run(g, y, x=x), F.max_pool2d(torch.from_numpy(x), 3, 2, 1, (2, 1), True))


def test_pool_asymmetric_padding_counts_the_pads_it_has():
    x = _rand((1, 2, 6), 22)
    g = Graph()
    y = g.pool(g.input("x", x.shape), "mean", 3, 2, padding=0, padding_end=1)
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (0, 1)])
    want = np.stack([padded[..., i:i + 3].mean(-1) for i in (0, 2, 4)], axis=-1)
    _close(_run(g, y, x=x), want)
    g2 = Graph()
    y2 = g2.pool(g2.input("x", x.shape), "mean", 3, 2, padding_end=1, count_include_pad=False)
    want2 = np.stack([x[..., i:min(i + 3, 6)].astype(np.float64).mean(-1) for i in (0, 2, 4)], axis=-1)
    _close(_run(g2, y2, x=x), want2)


def test_pool_mode_errors():
    g = Graph()
    x = g.input("x", (1, 2, 6))
    with pytest.raises(GraphError, match="apply to mean pooling only, not MAX"):
        g.pool(x, "max", 2, divisor=3)
    with pytest.raises(GraphError, match="divisor -1"):
        g.pool(x, "mean", 2, divisor=-1)


# -- AdaptivePool ------------------------------------------------------------------------------------
ADAPTIVE_CASES = [
    ((1, 2, 7), (3,)),
    ((2, 3, 10), (4,)),
    ((1, 2, 5), (8,)),  # more bins than elements: overlapping bins
    ((2, 3, 7, 9), (3, 4)),
    ((1, 2, 7, 7), (1, 1)),
    ((1, 1, 4, 6, 5), (2, 3, 2)),
]
TORCH_ADAPTIVE_AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
TORCH_ADAPTIVE_MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}


@pytest.mark.parametrize("shape, size", ADAPTIVE_CASES)
def test_adaptive_pools_match_torch(shape, size):
    x = _rand(shape, 23)
    x.reshape(-1)[::11] = np.nan
    g = Graph()
    xin = g.input("x", shape)
    avg, hi = g.adaptive_avg_pool(xin, size), g.adaptive_max_pool(xin, size)
    g.output(avg, hi)
    out = run_reference(g, {"x": x})
    t = torch.from_numpy(x)
    _close(out[avg.name], TORCH_ADAPTIVE_AVG[len(size)](t, size))
    _close(out[hi.name], TORCH_ADAPTIVE_MAX[len(size)](t, size))


def test_global_pools_keep_unit_dims():
    x = _rand((2, 3, 5, 4), 24)
    g = Graph()
    xin = g.input("x", x.shape)
    avg, hi = g.global_avg_pool(xin), g.global_max_pool(xin)
    g.output(avg, hi)
    out = run_reference(g, {"x": x})
    assert avg.shape == (2, 3, 1, 1)
    _close(out[avg.name], x.astype(np.float64).mean(axis=(2, 3), keepdims=True))
    _close(out[hi.name], x.max(axis=(2, 3), keepdims=True))
    with pytest.raises(GraphError, match="must be static"):
        g.global_avg_pool(g.input("s", (1, 2, "T")))


@pytest.mark.parametrize("shape, c_out, kernel, window", [
    ((1, 2, 5), 3, (3,), (2, 1, 1, 1, 1)),  # window: stride, padding, output_padding, dilation, groups
    ((2, 4, 4, 3), 4, (3, 2), (3, 0, 2, 2, 2)),
])
def test_conv_transpose_multiplies_zeros_between_inputs(shape, c_out, kernel, window):
    stride, padding, out_pad, dilation, groups = window
    x, w = _rand(shape, 25), _rand((shape[1], c_out // groups) + kernel, 26)
    w[0, 0, (0,) * len(kernel)] = np.inf  # reaches outputs between and beyond the inputs: NaN there
    w[1, -1, (-1,) * len(kernel)] = np.nan
    g = Graph()
    y = g.conv_transpose(g.input("x", shape), g.input("w", w.shape), *window)
    got = _run(g, y, x=x, w=w)
    _close(got, zero_stuffed_conv_transpose(x, w, *window).float(), 1e-5)
    tx, tw = torch.from_numpy(x).double(), torch.from_numpy(w).double()
    scatter = TORCH_CONV_T[len(kernel)](tx, tw, None, stride, padding, out_pad, groups, dilation)
    assert np.isnan(got).sum() > np.isnan(scatter.numpy()).sum()  # torch's scatter skips those products
    w[np.isinf(w) | np.isnan(w)] = 0.5
    _close(_run(g, y, x=x, w=w), zero_stuffed_conv_transpose(x, w, *window).float(), 1e-5)

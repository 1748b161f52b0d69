"""Conv family on the GPU vs torch.nn.functional (float64) and the numpy reference.

Conv / ConvTranspose run an implicit GEMM (conv_gemm; conv_gemm_taps for deep convs over few
positions) or the direct kernel (each is forced on a subset of the cases); Pool / AdaptivePool run
conv_pool or, for large windows, conv_pool_rows; Im2Col its kernel. None of these graphs has a host
step.

Tolerances: convs compare with rtol = atol = 1e-4 ("matmul"): weights are scaled by 1/sqrt(fan_in)
so outputs are O(1), and f32 sums of up to ~1000 products stay well inside that. Pools compare
with 1e-6 (max/min are exact; a mean is one f32 sum of at most a few hundred values and a divide).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conv_oracles import zero_stuffed_conv_transpose
from helpers import TOL, assert_close, check_op, rand

import rlxpy
from rlxpy import env
from rlxpy.errors import GraphError
from rlxpy.wgpu_backend.lowering import conv as conv_lowering
from rlxpy.wgpu_backend.lowering import conv_gemm

CONV_TOL = TOL["matmul"]
POOL_TOL = TOL["elementwise"]
TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
TORCH_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
ACTS = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "sigmoid": torch.sigmoid}

#: (batch, c_in, c_out, spatial, kernel, stride, padding, padding_end, dilation, groups, bias, act):
#: channels 1/3/17, spatial 1/5/31, kernels 1/3/5/7, stride 1/2/3, dilation 1/2, groups 1/2/depthwise,
#: padding 0/1/asymmetric, batch 1/3, sampled over 1-D/2-D/3-D.
CONV_CASES = [
    (1, 1, 1, (1,), (1,), 1, 0, None, 1, 1, False, None),
    (3, 3, 17, (31,), (5,), 2, 2, None, 1, 1, True, "relu"),
    (1, 17, 17, (31,), (7,), 3, 3, None, 2, 17, True, None),
    (3, 17, 3, (5,), (3,), 1, 1, (2,), 1, 1, False, "gelu"),
    (1, 4, 6, (31,), (3,), 2, 0, None, 2, 2, True, "silu"),
    (1, 3, 17, (31, 31), (7, 7), 2, 3, None, 1, 1, True, "relu"),
    (3, 17, 17, (5, 5), (3, 3), 1, 1, None, 1, 1, False, None),
    (1, 17, 17, (31, 5), (3, 3), 2, 1, None, 1, 17, True, "relu"),
    (3, 17, 34, (5, 31), (5, 3), (1, 2), (2, 1), None, (1, 2), 17, False, "sigmoid"),
    (1, 4, 6, (9, 7), (3, 3), 1, 0, None, 2, 2, False, None),
    (1, 3, 1, (1, 1), (3, 3), 1, 1, None, 1, 1, True, None),
    (3, 1, 17, (5, 5), (1, 1), 1, 0, None, 1, 1, True, "relu"),
    (1, 17, 32, (31, 31), (1, 1), 2, 0, None, 1, 1, False, None),
    (1, 16, 64, (5, 7), (3, 3), 1, 1, None, 1, 2, True, "silu"),
    (1, 3, 17, (5, 6), (3, 2), (3, 1), (0, 1), (2, 0), 1, 1, True, None),
    (3, 17, 3, (31, 31), (3, 3), 3, 1, None, 2, 1, False, "relu"),
    (1, 6, 70, (7, 9), (3, 3), 1, 1, None, 1, 1, True, "gelu"),
    (1, 64, 96, (14, 14), (3, 3), 1, 1, None, 1, 1, True, "relu"),
    (1, 3, 17, (5, 5, 5), (3, 3, 3), 1, 1, None, 1, 1, True, "relu"),
    (3, 4, 4, (5, 6, 7), (3, 1, 3), (2, 1, 1), (1, 0, 1), None, (1, 1, 2), 4, False, None),
    (1, 2, 17, (1, 5, 31), (1, 3, 5), 1, (0, 1, 2), None, 1, 1, True, None),
]


def _conv_inputs(case, seed: int = 0):
    batch, c_in, c_out, spatial, kernel, *_rest, groups, bias, _ = case
    x = rand((batch, c_in) + spatial, seed, low=-1.0, high=1.0)
    w = rand((c_out, c_in // groups) + kernel, seed + 1) / math.sqrt(c_in // groups * math.prod(kernel))
    return [x, w] + ([rand((c_out,), seed + 2)] if bias else [])


def _torch_conv(case):
    """The oracle: asymmetric padding as an explicit F.pad, then torch's conv in float64."""
    *_, spatial, kernel, stride, padding, padding_end, dilation, groups, _bias, act = case
    rank = len(kernel)

    def oracle(x, w, b=None):
        x, w = x.double(), w.double()
        pad = padding
        if padding_end is not None:
            begin = (padding,) * rank if isinstance(padding, int) else padding
            end = padding_end * rank if len(padding_end) == 1 else padding_end
            x = F.pad(x, [p for pair in zip(reversed(begin), reversed(end)) for p in pair])
            pad = 0
        y = TORCH_CONV[rank](x, w, None if b is None else b.double(), stride, pad, dilation, groups)
        return ACTS[act](y).float()

    return oracle


def _build_conv(case):
    *_, stride, padding, padding_end, dilation, groups, _bias, act = case

    def build(g, x, w, b=None):
        return g.conv(x, w, stride, padding, dilation, groups, bias=b, activation=act,
                      padding_end=padding_end)

    return build


def _steps(build, inputs):
    g = rlxpy.Graph("steps")
    nodes = [g.input(f"x{i}", a.shape) for i, a in enumerate(inputs)]
    outs = build(g, *nodes)
    g.output(*(outs if isinstance(outs, tuple) else (outs,)))
    return [(s.kind, s.kernel) for s in rlxpy.compile(g).schedule.steps]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{len(c[3])}d-{c[1]}x{c[2]}-g{c[9]}")
def test_conv_matches_torch(device, case):
    inputs = _conv_inputs(case)
    check_op(_build_conv(case), inputs, _torch_conv(case), tol=CONV_TOL)
    steps = _steps(_build_conv(case), inputs)
    channels = case[2] // case[9]
    want = ["conv_direct"] if channels < conv_lowering.DIRECT_MAX_CHANNELS else ["conv_gemm"]
    if len(steps) == 2:  # a grid this small splits K
        want.append("conv_split_sum")
    assert steps == [("gpu", kernel) for kernel in want]


#: cases run again on the kernel the lowerer does not pick for them
FORCED = [(CONV_CASES[i], path) for i, path in ((2, "gemm"), (7, "gemm"), (19, "gemm"), (1, "direct"),
                                                 (13, "direct"), (18, "direct"))]


@pytest.mark.parametrize("case, path", FORCED, ids=lambda v: v if isinstance(v, str) else f"{len(v[3])}d")
def test_both_conv_kernels_compute_every_case(device, monkeypatch, case, path):
    monkeypatch.setattr(conv_lowering, "FORCE_PATH", path)
    inputs = _conv_inputs(case, seed=3)
    check_op(_build_conv(case), inputs, _torch_conv(case), tol=CONV_TOL)
    want = "conv_gemm" if path == "gemm" else "conv_direct"
    assert _steps(_build_conv(case), inputs) == [("gpu", want)]


@pytest.mark.parametrize("case, splits", [(CONV_CASES[17], 3), (CONV_CASES[13], 5), (CONV_CASES[5], 2)],
                         ids=["3x3", "groups", "stem"])
def test_split_k_sums_the_parts_in_order(device, monkeypatch, case, splits):
    monkeypatch.setattr(conv_gemm, "FORCE_SPLITS", splits)
    inputs = _conv_inputs(case, seed=5)
    check_op(_build_conv(case), inputs, _torch_conv(case), tol=CONV_TOL)
    assert _steps(_build_conv(case), inputs) == [("gpu", "conv_gemm"), ("gpu", "conv_split_sum")]


def test_gemm_tile_of_128_positions(device, monkeypatch):
    monkeypatch.setattr(conv_gemm, "FORCE_ROWS", 128)
    case = (3, 17, 70, (13, 11), (3, 3), 1, 1, None, 1, 1, True, "relu")
    check_op(_build_conv(case), _conv_inputs(case, seed=4), _torch_conv(case), tol=CONV_TOL)


#: (case, forced BK, forced BM, forced BN): conv_gemm's K steps of 16 k (channel runs of 16, and a
#: 3-channel stem decoding each element's tap), and its 8-channel threads (BN = 128, two vec4s per k)
GEMM_STEPS = [
    ((3, 32, 70, (13, 11), (3, 3), 1, 1, None, 1, 1, True, "relu"), 16, 128, None),
    ((1, 3, 17, (31, 31), (7, 7), 2, 3, None, 1, 1, True, None), 16, 64, None),
    ((2, 17, 130, (9, 7), (3, 3), 2, 1, None, 1, 1, True, "gelu"), 8, 128, 128),
    ((2, 48, 200, (7, 5), (3, 3), 1, 1, None, 1, 1, False, None), 16, 64, 128),
]


@pytest.mark.parametrize("case, bk, rows, cols", GEMM_STEPS,
                         ids=lambda v: str(v) if isinstance(v, int) else None)
def test_gemm_k_steps_of_16_and_8_channels_per_thread(device, monkeypatch, case, bk, rows, cols):
    monkeypatch.setattr(conv_gemm, "FORCE_BK", bk)
    monkeypatch.setattr(conv_gemm, "FORCE_ROWS", rows)
    monkeypatch.setattr(conv_gemm, "FORCE_COLS", cols)
    check_op(_build_conv(case), _conv_inputs(case, seed=7), _torch_conv(case), tol=CONV_TOL)


#: (case, forced BM, forced BN, forced splits): conv_gemm_taps' tiles (1 to 8 channels per thread,
#: 4 or 8 positions), K steps of 8 channels (1x1) with a short last one, of 2 channels (1x3), of one
#: channel (3x3), channel tails in a split's last step, a 3-D window, groups and a transposed conv
TAP_TILES = [
    ((3, 20, 130, (7, 5), (1, 1), 1, 0, None, 1, 1, True, "relu"), 128, 128, None),
    ((2, 21, 70, (9, 6), (1, 3), 1, (0, 1), None, 1, 1, False, None), 64, 128, 2),
    ((1, 13, 40, (10, 11), (3, 3), 2, 1, None, 2, 1, True, "gelu"), 128, 16, None),
    ((3, 19, 33, (6, 7), (1, 1), 1, 0, None, 1, 1, True, None), 64, 32, 3),
    ((1, 5, 24, (4, 5, 6), (2, 2, 2), 1, 1, None, 1, 1, True, "silu"), 64, 64, None),
    ((2, 24, 48, (8, 8), (3, 3), 1, 1, None, 1, 3, False, "relu"), 128, 16, 4),
]


@pytest.mark.parametrize("case, rows, cols, splits", TAP_TILES,
                         ids=lambda v: str(v) if isinstance(v, int) else None)
def test_gemm_taps_tiles_and_splits(device, monkeypatch, case, rows, cols, splits):
    monkeypatch.setattr(conv_gemm, "FORCE_KERNEL", "taps")
    monkeypatch.setattr(conv_gemm, "FORCE_ROWS", rows)
    monkeypatch.setattr(conv_gemm, "FORCE_COLS", cols)
    monkeypatch.setattr(conv_gemm, "FORCE_SPLITS", splits)
    inputs = _conv_inputs(case, seed=6)
    check_op(_build_conv(case), inputs, _torch_conv(case), tol=CONV_TOL)
    want = [("gpu", "conv_gemm_taps")] + ([("gpu", "conv_split_sum")] if splits else [])
    assert _steps(_build_conv(case), inputs) == want


def test_deep_convs_take_the_taps_kernel_with_a_split_filling_one_wave(device, monkeypatch):
    """The deep-conv route (ResNet-18's last stage at batch 32) on a small conv: thresholds lowered so
    it applies; 128 x 128 tiles where the device's workgroup memory holds them, else 64 x 128."""
    dims = {"m": 1568, "kdim": 4608, "kvol": 9, "c_in_g": 512, "c_out_g": 512, "groups": 1, "total": 802816}
    def route(pl):
        return pl.taps, pl.deep, pl.bm, pl.bn

    assert route(conv_gemm.plan(dims, 49152)) == (True, True, 128, 128)
    assert conv_gemm.wanted_splits(dims, 49152) == 5  # 52 tiles x 5 splits: one wave of WAVE
    assert route(conv_gemm.plan(dims, 16384)) == (True, True, 64, 128)
    assert conv_gemm.wanted_splits(dims, 16384) == 2
    for shallow in ({**dims, "m": 49}, {**dims, "kdim": 576, "c_in_g": 64}, {**dims, "c_out_g": 64},
                    {**dims, "kvol": 25, "kdim": 12800}, {**dims, "m": 6272}):
        assert not conv_gemm.plan(shallow, 49152).taps
    monkeypatch.setattr(conv_gemm, "DEEP_MIN_ROWS", 64)
    monkeypatch.setattr(conv_gemm, "DEEP_MIN_K", 64)
    monkeypatch.setattr(conv_gemm, "WAVE", 12)
    case = (2, 64, 130, (9, 7), (3, 3), 1, 1, None, 1, 1, True, "relu")  # K = 576: 2 splits of >= 256
    inputs = _conv_inputs(case, seed=8)
    check_op(_build_conv(case), inputs, _torch_conv(case), tol=CONV_TOL)
    assert _steps(_build_conv(case), inputs) == [("gpu", "conv_gemm_taps"), ("gpu", "conv_split_sum")]


def test_wide_convs_take_128_by_128_gemm_tiles_with_a_split_filling_one_wave(device, monkeypatch):
    """The wide-conv route (ResNet-18's third stage at batch 32): conv_gemm, 8 x 8 outputs per thread,
    WAVE // tiles splits; layer2-like (128 channels) and batch-1 convs keep their tiles."""
    dims = {"m": 6272, "kdim": 2304, "kvol": 9, "c_in_g": 256, "c_out_g": 256, "groups": 1, "total": 1605632}
    pl = conv_gemm.plan(dims, 49152)
    assert (pl.taps, pl.wide, pl.bm, pl.bn, pl.workgroups) == (False, True, 128, 128, 98)
    assert conv_gemm.wanted_splits(dims, 49152) == 2
    for narrow in ({**dims, "c_out_g": 128}, {**dims, "m": 196}, {**dims, "kdim": 256, "kvol": 1}):
        assert not conv_gemm.plan(narrow, 49152).wide
    monkeypatch.setattr(conv_gemm, "DEEP_MIN_ROWS", 64)
    monkeypatch.setattr(conv_gemm, "WIDE_MIN_K", 64)
    monkeypatch.setattr(conv_gemm, "WIDE_MIN_COLS", 128)
    monkeypatch.setattr(conv_gemm, "WAVE", 6)
    case = (2, 64, 150, (9, 7), (3, 3), 1, 1, None, 1, 1, True, "relu")  # K = 576: 2 splits of >= 256
    inputs = _conv_inputs(case, seed=9)
    check_op(_build_conv(case), inputs, _torch_conv(case), tol=CONV_TOL)
    assert _steps(_build_conv(case), inputs) == [("gpu", "conv_gemm"), ("gpu", "conv_split_sum")]


@pytest.mark.parametrize("kernel", ["taps", "gather"])
def test_both_gemm_kernels_compute_small_and_large_windows(device, monkeypatch, kernel):
    """Either implicit GEMM computes any window: conv_gemm_taps on a 5x5 one too (past TAPS_MAX)."""
    monkeypatch.setattr(conv_gemm, "FORCE_KERNEL", kernel)
    monkeypatch.setattr(conv_gemm, "TAPS_MAX", 32)
    for case in (CONV_CASES[17], (1, 9, 20, (11, 7), (5, 5), 2, 2, None, 1, 1, True, "relu")):
        check_op(_build_conv(case), _conv_inputs(case, seed=7), _torch_conv(case), tol=CONV_TOL)
        want = "conv_gemm_taps" if kernel == "taps" else "conv_gemm"
        assert _steps(_build_conv(case), _conv_inputs(case, seed=7))[0] == ("gpu", want)


def test_conv_propagates_nan_and_inf_like_torch(device):
    x = rand((2, 4, 7, 6), 5, low=-1.0, high=1.0)
    x[0, 1, 3, 2], x[1, 0, 0, 0] = np.nan, np.inf
    w = rand((16, 4, 3, 3), 6) / 6
    # lands in the top/left padding: 0 * inf = NaN there, as in torch's float64 conv (its float32
    # CPU path, oneDNN, skips padded taps instead)
    w[3, 2, 0, 0] = np.inf
    dw = rand((4, 1, 3, 3), 7)
    dw[1, 0, 2, 2] = -np.inf

    def build(g, xn, wn, dwn):
        return g.conv(xn, wn, padding=1), g.conv(xn, dwn, padding=1, groups=4)

    def oracle(a, b, c):
        a, b, c = a.double(), b.double(), c.double()
        return F.conv2d(a, b, padding=1).float(), F.conv2d(a, c, padding=1, groups=4).float()

    out = check_op(build, [x, w, dw], oracle, tol=CONV_TOL)
    assert all(np.isnan(v).any() and np.isinf(v).any() for v in out.values())


# -- ConvTranspose ---------------------------------------------------------------------------------
#: (batch, c_in, c_out, spatial, kernel, stride, padding, output_padding, dilation, groups, bias, act)
CONV_T_CASES = [
    (1, 1, 1, (1,), (1,), 1, 0, 0, 1, 1, False, None),
    (3, 17, 3, (5,), (4,), 2, 1, 1, 1, 1, True, "relu"),
    (1, 4, 6, (31,), (3,), 3, 0, 2, 2, 2, False, None),
    (1, 17, 17, (5, 5), (3, 3), 2, 1, 1, 1, 17, True, None),
    (3, 17, 32, (5, 7), (4, 4), 2, 1, 0, 1, 1, True, "silu"),
    (1, 3, 17, (7, 5), (3, 5), (3, 1), (1, 2), (2, 0), (1, 2), 1, False, "gelu"),
    (1, 16, 24, (1, 5, 4), (2, 3, 3), (2, 1, 2), (0, 1, 1), 0, 1, 2, True, None),
]


def _build_conv_t(case):
    *_, stride, padding, out_pad, dilation, groups, _bias, act = case

    def build(g, x, w, b=None):
        return g.conv_transpose(x, w, stride, padding, out_pad, dilation, groups, bias=b, activation=act)

    return build


def _torch_conv_t(case):
    *_, kernel, stride, padding, out_pad, dilation, groups, _bias, act = case

    def oracle(x, w, b=None):
        b = None if b is None else b.double()
        y = TORCH_CONV_T[len(kernel)](x.double(), w.double(), b, stride, padding, out_pad, groups, dilation)
        return ACTS[act](y).float()

    return oracle


def _conv_t_inputs(case, seed: int = 10):
    batch, c_in, c_out, spatial, kernel, *_rest, groups, bias, _ = case
    x = rand((batch, c_in) + spatial, seed, low=-1.0, high=1.0)
    w = rand((c_in, c_out // groups) + kernel, seed + 1) / math.sqrt(c_in // groups * math.prod(kernel))
    return [x, w] + ([rand((c_out,), seed + 2)] if bias else [])


@pytest.mark.parametrize("path", ["auto", "gemm", "direct"])
@pytest.mark.parametrize("case", CONV_T_CASES, ids=lambda c: f"{len(c[3])}d-{c[1]}x{c[2]}-s{c[5]}")
def test_conv_transpose_matches_torch(device, monkeypatch, case, path):
    if path != "auto":
        monkeypatch.setattr(conv_lowering, "FORCE_PATH", path)
    inputs = _conv_t_inputs(case)
    check_op(_build_conv_t(case), inputs, _torch_conv_t(case), tol=CONV_TOL)
    assert {kind for kind, _ in _steps(_build_conv_t(case), inputs)} == {"gpu"}


@pytest.mark.parametrize("path", ["gemm", "direct"])
def test_conv_transpose_nan_and_inf_as_the_ir_defines_them(device, monkeypatch, path):
    """Non-finite inputs propagate as in torch; a non-finite weight also reaches the outputs its tap
    covers between the inputs (a conv over zero-stuffed x: the oracle computes exactly that)."""
    monkeypatch.setattr(conv_lowering, "FORCE_PATH", path)
    x = rand((2, 8, 5, 4), 12, low=-1.0, high=1.0)
    x[0, 3, 2, 1], x[1, 0, 4, 3] = np.nan, -np.inf
    w = rand((8, 8, 3, 3), 13) / 6
    w[2, 5, 1, 2] = np.inf
    out = check_op(lambda g, xn, wn: g.conv_transpose(xn, wn, 2, 1, 1),
                   [x, w], lambda a, b: zero_stuffed_conv_transpose(a, b, 2, 1, 1, 1).float(), tol=CONV_TOL)
    assert np.isnan(next(iter(out.values()))).any()


# -- Pool, AdaptivePool ----------------------------------------------------------------------------
TORCH_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
TORCH_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
#: (shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor)
POOL_CASES = [
    ((1, 1, 1), (1,), 1, 0, False, True, None),
    ((3, 17, 31), (3,), 2, 1, True, False, None),
    ((1, 3, 5), (5,), 3, 2, True, True, None),
    ((3, 3, 31, 31), (3, 3), 2, 1, False, True, None),
    ((1, 17, 5, 31), (2, 3), (2, 3), (1, 1), True, False, None),
    ((1, 3, 31, 5), (7, 5), (3, 2), (3, 2), True, True, 7),
    ((3, 2, 5, 6, 7), (3, 2, 3), (2, 1, 2), (1, 1, 0), True, False, None),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{len(c[1])}d-k{c[1][0]}-ceil{int(c[4])}")
def test_max_and_avg_pool_match_torch(device, case):
    shape, kernel, stride, padding, ceil, include_pad, divisor = case
    x = rand(shape, 20)
    x.reshape(-1)[::13] = -np.inf  # padding must never win against -inf values
    spatial = len(kernel)

    def build(g, xn):
        return (g.max_pool(xn, kernel, stride, padding, ceil_mode=ceil),
                g.avg_pool(xn, kernel, stride, padding, ceil_mode=ceil, count_include_pad=include_pad,
                           divisor_override=divisor),
                g.pool(xn, "min", kernel, stride, padding, ceil_mode=ceil))

    def oracle(t):
        extra = {"divisor_override": divisor} if spatial > 1 else {}  # avg_pool1d has none
        return (TORCH_MAX[spatial](t, kernel, stride, padding, 1, ceil),
                TORCH_AVG[spatial](t, kernel, stride, padding, ceil, include_pad, **extra),
                -TORCH_MAX[spatial](-t, kernel, stride, padding, 1, ceil))

    check_op(build, [x], oracle, tol=POOL_TOL)


def test_pool_sum_prod_dilation_and_asymmetric_padding(device):
    x = rand((2, 3, 11, 9), 21, low=0.5, high=1.5)

    def build(g, xn):
        return (g.max_pool(xn, 3, 2, 1, dilation=(2, 1), ceil_mode=True),
                g.pool(xn, "sum", (2, 3), (1, 2), (0, 1), padding_end=(1, 0)),
                g.pool(xn, "prod", 2, 2))

    def oracle(t):
        padded = F.pad(t, (1, 0, 0, 1))  # w: 1 before, 0 after; h: 0 before, 1 after
        return (F.max_pool2d(t, 3, 2, 1, (2, 1), True), F.avg_pool2d(padded, (2, 3), (1, 2)) * 6,
                torch.exp(F.avg_pool2d(torch.log(t.double()), 2) * 4).float())

    check_op(build, [x], oracle, tol=TOL["reduction"])


def test_pools_propagate_nan_like_torch(device):
    x = rand((2, 3, 9, 8), 22)
    x[0, 1, 4, 4], x[1, 2, 0, 7] = np.nan, np.inf

    def build(g, xn):
        return (g.max_pool(xn, 3, 2, 1), g.avg_pool(xn, 2), g.adaptive_max_pool(xn, (2, 3)),
                g.global_avg_pool(xn))

    def oracle(t):
        return (F.max_pool2d(t, 3, 2, 1), F.avg_pool2d(t, 2), F.adaptive_max_pool2d(t, (2, 3)),
                F.adaptive_avg_pool2d(t, 1))

    out = check_op(build, [x], oracle, tol=POOL_TOL)
    assert np.isnan(out[next(iter(out))]).sum() == 1  # the one window holding the NaN, no other


TORCH_ADAPTIVE = {("mean", 1): F.adaptive_avg_pool1d, ("mean", 2): F.adaptive_avg_pool2d,
                  ("mean", 3): F.adaptive_avg_pool3d, ("max", 1): F.adaptive_max_pool1d,
                  ("max", 2): F.adaptive_max_pool2d, ("max", 3): F.adaptive_max_pool3d}
ADAPTIVE_CASES = [
    ((3, 17, 31), (5,)),
    ((1, 3, 5), (7,)),  # more bins than elements: bins overlap
    ((3, 3, 31, 5), (7, 1)),
    ((1, 17, 7, 7), (1, 1)),
    ((1, 3, 5, 31, 5), (2, 3, 5)),
    ((2, 3, 31, 31), (1, 1)),  # 961 taps per output: one workgroup per output
]


@pytest.mark.parametrize("case", ADAPTIVE_CASES, ids=lambda c: f"{len(c[1])}d-{c[1]}")
def test_adaptive_pools_match_torch(device, case):
    shape, size = case
    x = rand(shape, 23)

    def build(g, xn):
        return g.adaptive_avg_pool(xn, size), g.adaptive_max_pool(xn, size)

    def oracle(t):
        return TORCH_ADAPTIVE["mean", len(size)](t, size), TORCH_ADAPTIVE["max", len(size)](t, size)

    check_op(build, [x], oracle, tol=TOL["reduction"])


def test_large_windows_run_one_workgroup_per_output(device):
    x = rand((2, 3, 31, 31), 24)
    steps = _steps(lambda g, xn: (g.global_max_pool(xn), g.avg_pool(xn, 31, 1, 0)), [x])
    assert steps == [("gpu", "conv_pool_rows")] * 2
    check_op(lambda g, xn: (g.global_max_pool(xn), g.avg_pool(xn, 31)), [x],
             lambda t: (F.adaptive_max_pool2d(t, 1), F.avg_pool2d(t, 31)), tol=TOL["reduction"])


# -- Im2Col ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", [
    ((1, 1, 1, 1), (1, 1), 1, 0, 1),
    ((3, 17, 5, 31), (3, 3), (1, 2), 1, (2, 1)),
    ((1, 3, 31, 5), (5, 2), 3, (2, 0), 1),
])
def test_im2col_matches_torch_unfold(device, shape, kernel, stride, padding, dilation):
    x = rand(shape, 25)
    x.reshape(-1)[::7] = np.nan

    def oracle(t):
        cols = F.unfold(t, kernel, dilation, padding, stride)  # [N, C*kh*kw, L]
        return cols.transpose(1, 2).reshape(-1, cols.shape[1])

    def build(g, xn):
        return g.im2col(xn, kernel, stride, padding, dilation)

    check_op(build, [x], oracle, tol="exact")
    assert _steps(build, [x]) == [("gpu", "conv_im2col")]


# -- the conv epilogue pattern ---------------------------------------------------------------------
def test_conv_add_bias_activation_run_as_one_step_with_identical_results(device):
    g = rlxpy.Graph("epilogue")
    x = g.input("x", (2, 6, 11, 9))
    y = g.conv(x, g.param("w", (24, 6, 3, 3)), 2, 1)
    y = g.silu(g.add(y, g.param("b", (1, 24, 1, 1))), name="y")
    d = g.conv(y, g.param("dw", (24, 1, 5, 5)), 1, 2, groups=24)
    d = g.relu(g.add(g.param("db", (24, 1, 1)), d), name="d")
    g.output(d)
    params = {"w": rand((24, 6, 3, 3), 40) / 7, "b": rand((1, 24, 1, 1), 41),
              "dw": rand((24, 1, 5, 5), 42) / 5, "db": rand((24, 1, 1), 43)}
    exes = []
    for skip in ("", "conv_epilogue"):
        with env.override(RLX_WGPU_SKIP_PATTERNS=skip):
            exes.append(rlxpy.compile(g))
        for name, value in params.items():
            exes[-1].set_param(name, value)
    fused, plain = exes
    assert [s.kernel for s in fused.schedule.steps] == ["conv_gemm", "conv_direct"]
    assert len(plain.schedule.steps) == 8  # each conv, the bias broadcast, the add, the activation
    xv = rand((2, 6, 11, 9), 44)
    np.testing.assert_array_equal(fused.run({"x": xv})["d"], plain.run({"x": xv})["d"])
    t = {k: torch.from_numpy(v).double() for k, v in params.items()}
    want = F.silu(F.conv2d(torch.from_numpy(xv).double(), t["w"], t["b"].flatten(), 2, 1))
    want = torch.relu(F.conv2d(want, t["dw"], t["db"].flatten(), 1, 2, 1, 24))
    assert_close(fused.run({"x": xv})["d"], want.numpy(), *CONV_TOL, "fused epilogue vs torch")


# -- whole graphs: no host step, bind-window caps ----------------------------------------------------
def _small_cnn(g: rlxpy.Graph, x, params: dict[str, np.ndarray]):
    """stem conv + max pool, a basic block (3x3, 3x3, residual), a depthwise + 1x1 pair, a
    transposed conv, global average pool and a linear head."""
    def p(name, shape, scale=1.0):
        params[name] = rand(shape, len(params) + 30) * scale
        return g.param(name, shape)

    h = g.conv(x, p("w0", (16, 3, 7, 7), 0.08), 2, 3, bias=p("b0", (16,)), activation="relu")
    h = g.max_pool(h, 3, 2, 1)
    r = g.conv(h, p("w1", (16, 16, 3, 3), 0.08), 1, 1, bias=p("b1", (16,)), activation="relu")
    r = g.conv(r, p("w2", (16, 16, 3, 3), 0.08), 1, 1, bias=p("b2", (16,)))
    h = g.relu(g.add(h, r))
    d = g.conv(h, p("w3", (16, 1, 3, 3), 0.3), 1, 1, groups=16, activation="relu")
    d = g.conv(d, p("w4", (24, 16, 1, 1), 0.25))
    u = g.conv_transpose(d, p("w5", (24, 8, 2, 2), 0.2), 2)
    pooled = g.reshape(g.global_avg_pool(u), [x.shape[0], 8])
    return g.linear(pooled, p("wl", (8, 5), 0.3), p("bl", (5,)))


def _torch_small_cnn(x, params):
    t = {k: torch.from_numpy(v).double() for k, v in params.items()}
    h = torch.relu(F.conv2d(torch.from_numpy(x).double(), t["w0"], t["b0"], 2, 3))
    h = F.max_pool2d(h, 3, 2, 1)
    r = torch.relu(F.conv2d(h, t["w1"], t["b1"], 1, 1))
    h = torch.relu(h + F.conv2d(r, t["w2"], t["b2"], 1, 1))
    d = F.conv2d(torch.relu(F.conv2d(h, t["w3"], None, 1, 1, 1, 16)), t["w4"])
    u = F.conv_transpose2d(d, t["w5"], stride=2)
    return (F.adaptive_avg_pool2d(u, 1).flatten(1) @ t["wl"] + t["bl"]).numpy()


def _compile_cnn(batch: int):
    g = rlxpy.Graph("cnn")
    params: dict[str, np.ndarray] = {}
    x = g.input("x", (batch, 3, 31, 31))
    g.output(_small_cnn(g, x, params))
    exe = rlxpy.compile(g)
    for name, value in params.items():
        exe.set_param(name, value)
    return exe, params


def test_a_small_cnn_has_no_host_steps(device):
    exe, params = _compile_cnn(3)
    assert [s.kind for s in exe.schedule.steps if s.kind != "gpu"] == []
    assert not exe.report().summary["host_kernels"]
    x = rand((3, 3, 31, 31), 26)
    got = next(iter(exe.run({"x": x}).values()))
    assert_close(got, _torch_small_cnn(x, params), *CONV_TOL, "small CNN vs torch")


def test_a_small_cnn_under_a_binding_cap_matches_uncapped(device):
    with env.override(RLX_WGPU_MAX_BINDING=64 << 10):
        capped, params = _compile_cnn(1)
    free, _ = _compile_cnn(1)
    assert capped.schedule.window_size <= 64 << 10 < capped.schedule.arena.size
    assert capped.report().summary["windows"] > 1
    x = rand((1, 3, 31, 31), 27)
    got, want = capped.run({"x": x}), free.run({"x": x})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name}: capped vs uncapped")
    assert_close(next(iter(got.values())), _torch_small_cnn(x, params), *CONV_TOL, "capped CNN vs torch")


# -- bad input: clear errors when the graph is built --------------------------------------------------
def test_bad_convs_name_the_node_op_and_shapes():
    g = rlxpy.Graph()
    x = g.input("x", (1, 6, 8, 8))
    with pytest.raises(GraphError, match=r"c1 \(Conv\): groups=4 must divide C_in=6 and C_out=8 "
                                         r"\(x f32\[1, 6, 8, 8\], w f32\[8, 1, 3, 3\]\)"):
        g.conv(x, g.param("w1", (8, 1, 3, 3)), groups=4, name="c1")
    with pytest.raises(GraphError, match=r"c2 \(Conv\): conv: window 9 \(kernel 9, dilation 1\) exceeds the "
                                         r"padded input 8 \(input f32\[1, 6, 8, 8\]\)"):
        g.conv(x, g.param("w2", (2, 6, 9, 3)), name="c2")
    with pytest.raises(GraphError, match=r"c3 \(Conv\): conv weight f32\[2, 6, 3\] must have the input's "
                                         r"rank 4"):
        g.conv(x, g.param("w3", (2, 6, 3)), name="c3")
    with pytest.raises(GraphError, match=r"c4 \(Conv\): conv input must be .* got f32\[6, 8\]"):
        g.conv(g.input("v", (6, 8)), g.param("w4", (2, 6, 3)), name="c4")
    with pytest.raises(GraphError, match=r"t1 \(ConvTranspose\): groups=4 must divide C_in=6"):
        g.conv_transpose(x, g.param("w5", (6, 2, 3, 3)), groups=4, name="t1")
    with pytest.raises(GraphError, match=r"p1 \(Pool\): pool: window 11 .* exceeds the padded input 10 "
                                         r"\(input f32\[1, 6, 8, 8\]\)"):
        g.max_pool(x, 11, padding=1, name="p1")
    with pytest.raises(GraphError, match=r"a1 \(AdaptivePool\): adaptive pool input must be"):
        g.adaptive_avg_pool(g.input("flat", (4,)), 2, name="a1")

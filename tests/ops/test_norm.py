"""GPU Softmax / LayerNorm / RmsNorm / FusedResidualLN / FusedResidualRmsNorm against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import ODD_SHAPES, assert_close, rand

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.ir.reference import run_reference
from rlxpy.wgpu_backend.lowering import reduce as reduce_lowering  # importing registers the kernels

SOFTMAX_TOL = (1e-5, 1e-6)
NORM_TOL = (1e-5, 1e-5)


def kernels_of(exe) -> dict[str, str]:
    return {step.node: step.kernel for step in exe.schedule.steps}


def t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


# -- softmax -----------------------------------------------------------------------------------

SOFTMAX_CASES = [
    # (shape, {axis: expected kernel})
    (ODD_SHAPES[0], {0: "norm_softmax_lines"}),
    (ODD_SHAPES[1], {-1: "norm_softmax_lines"}),
    (ODD_SHAPES[2], {0: "norm_softmax_lines", 1: "norm_softmax_lines"}),
    (ODD_SHAPES[3], {0: "norm_softmax_lines", -1: "norm_softmax_rows"}),
    (ODD_SHAPES[4], {0: "norm_softmax_lines", 1: "norm_softmax_lines", 2: "norm_softmax_rows"}),
    ((3, 1000), {-1: "norm_softmax_rows", 0: "norm_softmax_lines"}),
    ((2, 4097), {1: "norm_softmax_rows"}),
]


def softmax_graph(shape, axes, dtype=DType.F32, name=None):
    g = rlxpy.Graph("softmax_test")
    x = g.input("x", shape, dtype)
    outs = {axis: g.softmax(x, axis, name=name) for axis in axes}
    g.output(*outs.values())
    return g, rlxpy.compile(g), outs


@pytest.mark.parametrize("shape, kernels", SOFTMAX_CASES, ids=[str(c[0]) for c in SOFTMAX_CASES])
def test_softmax_matches_torch_on_every_axis(device, shape, kernels):
    g, exe, outs = softmax_graph(shape, kernels)
    assert {axis: kernels_of(exe)[node.name] for axis, node in outs.items()} == kernels
    # wide logits, and logits whose exp would overflow f32 unless the max is subtracted first
    for x in (rand(shape, seed=sum(shape), low=-8, high=8), rand(shape, seed=2, low=60, high=100)):
        got = exe.run({"x": x})
        for axis, node in outs.items():
            assert_close(got[node.name], torch.softmax(t(x), dim=axis).numpy(), *SOFTMAX_TOL, f"axis {axis}")


def special_rows(lines: np.ndarray) -> None:
    """Write NaN / +-inf patterns into rows of a [rows >= 7, cols >= 5] view."""
    lines[0, 2] = np.nan
    lines[1, 1] = np.inf
    lines[2, :] = -np.inf
    lines[3, 0] = -np.inf
    lines[4, 1], lines[4, 3] = np.inf, np.inf
    lines[5, 0], lines[5, 4] = -np.inf, np.inf
    lines[6, :] = 7.0  # constant row


@pytest.mark.parametrize("shape, axis", [((7, 40), 1), ((7, 5), 1), ((40, 7), 0), ((2, 40, 7), 1)])
def test_softmax_nan_and_inf_rows_like_torch(device, shape, axis):
    x = rand(shape, seed=5)
    lines = np.moveaxis(x, axis, -1)  # a view: the writes land in x
    special_rows(lines[0] if lines.ndim == 3 else lines)
    g, exe, outs = softmax_graph(shape, [axis])
    got = exe.run({"x": x})[outs[axis].name]
    assert_close(got, torch.softmax(t(x), dim=axis).numpy(), *SOFTMAX_TOL, "softmax with NaN/inf rows")


def test_softmax_on_lines_longer_than_lavapipe_loop_limit(device):
    """Two passes over a 40000-long line exceed lavapipe's 65535 loop steps per thread: chunked."""
    shape = (40000, 3)
    g, exe, outs = softmax_graph(shape, [0])
    # 2 statistics + 2 output chunks
    assert [s.kernel for s in exe.schedule.steps] == ["norm_softmax_lines"] * 4
    x = rand(shape, seed=6, low=-8, high=8)
    x[5, 0], x[39999, 1], x[:, 2] = np.nan, np.inf, -np.inf
    got = exe.run({"x": x})[outs[0].name]
    assert_close(got, torch.softmax(t(x), dim=0).numpy(), *SOFTMAX_TOL, "softmax over 40000")


def test_softmax_chunked_lines_with_a_tiny_loop_budget(device, monkeypatch):
    monkeypatch.setattr(reduce_lowering, "LOOP_BUDGET", 40)  # 24 steps per dispatch
    shape = (3, 101, 7)
    g, exe, outs = softmax_graph(shape, [1, 0])
    steps = [s.node for s in exe.schedule.steps]
    assert steps.count(outs[1].name) == 2 * 5 and steps.count(outs[0].name) == 1
    x = rand(shape, seed=7, low=-8, high=8)
    special_rows(np.moveaxis(x, 1, -1)[0])
    got = exe.run({"x": x})
    for axis, node in outs.items():
        assert_close(got[node.name], torch.softmax(t(x), dim=axis).numpy(), *SOFTMAX_TOL, f"axis {axis}")


def test_softmax_rejects_non_f32_input(device):
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"probs \(Softmax\).*f32.*i32"):
        softmax_graph((4, 8), [-1], DType.I32, name="probs")


# -- norms -------------------------------------------------------------------------------------

NORM_SHAPES = [*ODD_SHAPES, (3, 1000), (2, 4097)]


def norm_graph(shape):
    """All eight norm variants on inputs x, residual, bias, gamma, beta."""
    hidden = shape[-1]
    g = rlxpy.Graph("norm_test")
    x, residual = g.input("x", shape, DType.F32), g.input("residual", shape, DType.F32)
    bias, gamma, beta = (g.input(name, (hidden,), DType.F32) for name in ("bias", "gamma", "beta"))
    outs = {
        "ln2": g.layer_norm(x, gamma),
        "ln3": g.layer_norm(x, gamma, beta),
        "ln3_eps": g.layer_norm(x, gamma, beta, eps=0.5),
        "rms2": g.rms_norm(x, gamma),
        "rms3": g.rms_norm(x, gamma, beta, eps=1e-3),
        "res_ln": g.residual_layer_norm(x, residual, gamma, beta),
        "res_ln_bias": g.residual_layer_norm(x, residual, gamma, beta, bias=bias),
        "res_rms": g.residual_rms_norm(x, residual, gamma, beta),
        "res_rms_bias": g.residual_rms_norm(x, residual, gamma, beta, bias=bias, eps=1e-2),
    }
    g.output(*outs.values())
    return g, rlxpy.compile(g), outs


def torch_norms(feeds: dict[str, np.ndarray], dtype=torch.float32) -> dict[str, np.ndarray]:
    """torch's answers in ``dtype``; the residual sums are formed in f32 first, as the graph's f32 inputs
    define them (a float64 sum of a large-mean row would carry digits no f32 kernel can see)."""
    x, residual, bias = (t(feeds[k]) for k in ("x", "residual", "bias"))
    summed, summed_bias = (x + residual).to(dtype), (x + residual + bias).to(dtype)
    x, gamma, beta = (t(feeds[k]).to(dtype) for k in ("x", "gamma", "beta"))
    hidden = (x.shape[-1],)
    out = {
        "ln2": F.layer_norm(x, hidden, gamma),
        "ln3": F.layer_norm(x, hidden, gamma, beta),
        "ln3_eps": F.layer_norm(x, hidden, gamma, beta, eps=0.5),
        "rms2": F.rms_norm(x, hidden, gamma, eps=1e-6),
        "rms3": F.rms_norm(x, hidden, gamma, eps=1e-3) + beta,
        "res_ln": F.layer_norm(summed, hidden, gamma, beta),
        "res_ln_bias": F.layer_norm(summed_bias, hidden, gamma, beta),
        "res_rms": F.rms_norm(summed, hidden, gamma, eps=1e-6) + beta,
        "res_rms_bias": F.rms_norm(summed_bias, hidden, gamma, eps=1e-2) + beta,
    }
    return {k: v.to(torch.float32).numpy() for k, v in out.items()}


def norm_feeds(shape, seed: int, offset: float = 0.0) -> dict[str, np.ndarray]:
    hidden = shape[-1]
    return {"x": rand(shape, seed=seed) + np.float32(offset), "residual": rand(shape, seed=seed + 1),
            "bias": rand((hidden,), seed=seed + 2), "gamma": rand((hidden,), seed=seed + 3),
            "beta": rand((hidden,), seed=seed + 4)}


@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
def test_norms_match_torch(device, shape):
    g, exe, outs = norm_graph(shape)
    assert set(kernels_of(exe).values()) == {"norm_rows"}
    feeds = norm_feeds(shape, seed=sum(shape))
    got = exe.run(feeds)
    want = torch_norms(feeds)
    for name, node in outs.items():
        assert_close(got[node.name], want[name], *NORM_TOL, f"{name} on {shape}")


@pytest.mark.parametrize("shape, offset", [((4, 1000), 1000.0), ((3, 4097), 1e4), ((5, 255), -3e4)])
def test_layer_norm_with_large_mean_matches_torch_float64(device, shape, offset):
    """A large common offset: E[x^2] - mean^2 in f32 would lose every digit of the variance here."""
    g, exe, outs = norm_graph(shape)
    feeds = norm_feeds(shape, seed=11, offset=offset)
    feeds["x"] = (np.float32(offset) + np.random.default_rng(12).standard_normal(shape)).astype(np.float32)
    got = exe.run(feeds)
    want = torch_norms(feeds, torch.float64)
    for name in ("ln2", "ln3", "res_ln", "res_ln_bias"):
        assert_close(got[outs[name].name], want[name], 0.0, 1e-5, f"{name} with mean {offset}")
    ref = run_reference(g, feeds)
    assert_close(got[outs["ln3"].name], ref[outs["ln3"].name], 0.0, 1e-5, "ln3 vs reference")


def test_norms_nan_inf_and_constant_rows_like_torch(device):
    shape = (7, 40)
    feeds = norm_feeds(shape, seed=21)
    special_rows(feeds["x"])
    g, exe, outs = norm_graph(shape)
    got = exe.run(feeds)
    want = torch_norms(feeds)
    for name, node in outs.items():
        assert_close(got[node.name], want[name], *NORM_TOL, f"{name} with NaN/inf/constant rows")


def test_norm_rejects_non_f32_operands(device):
    g = rlxpy.Graph("bad_norm")
    x = g.input("x", (4, 8), DType.F32)
    gamma = g.input("gamma", (8,), DType.I32)
    g.output(g.layer_norm(x, gamma, name="ln"))
    with pytest.raises(rlxpy.UnsupportedOpError, match=r"ln \(LayerNorm\).*f32.*gamma"):
        rlxpy.compile(g)


def test_norm_beyond_the_loop_budget_is_a_limit_error(device, monkeypatch):
    monkeypatch.setattr(reduce_lowering, "LOOP_BUDGET", 70)
    g = rlxpy.Graph("long_norm")
    x, gamma = g.input("x", (2, 1000), DType.F32), g.input("gamma", (1000,), DType.F32)
    g.output(g.rms_norm(x, gamma, name="wide_rms"))
    with pytest.raises(rlxpy.LimitError, match=r"wide_rms \(RmsNorm\).*loop iterations"):
        rlxpy.compile(g)




# -- channel norms of CNNs: GroupNorm (and instance norm), BatchNorm ----------------------------------
def _with_edges(x: np.ndarray) -> np.ndarray:
    """NaN in sample 0's first group, +inf in the last sample's last group: those groups come out NaN."""
    x = x.copy()
    x[0, 0].reshape(-1)[0] = np.nan
    x[-1, -1].reshape(-1)[-1] = np.inf
    return x


@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((1, 4, 3, 7), 4), ((3, 8, 2, 3, 5), 1),
                                          ((2, 32, 33, 35), 8), ((1, 3, 2), 3)], ids=str)
@pytest.mark.parametrize("with_beta", [False, True])
def test_group_norm_matches_torch_with_nan_groups(device, shape, groups, with_beta):
    from helpers import check_op

    x = _with_edges(rand(shape, 40) * 3 + 1)
    gamma, beta = rand((shape[1],), 41), rand((shape[1],), 42)
    arrays = [x, gamma] + ([beta] if with_beta else [])

    def build(g, a, gm, *b):
        return g.group_norm(a, groups, gm, b[0] if b else None, eps=1e-5)

    def oracle(a, gm, *b):
        return F.group_norm(a, groups, gm, b[0] if b else None, eps=1e-5)

    out = check_op(build, arrays, oracle, tol=NORM_TOL)
    y = next(iter(out.values()))
    group = shape[1] // groups
    assert np.isnan(y[0, :group]).all() and np.isnan(y[-1, -group:]).all()


def test_group_norm_with_c_groups_matches_torch_instance_norm(device):
    from helpers import check_op

    x, gamma, beta = _with_edges(rand((2, 5, 9, 11), 43)), rand((5,), 44), rand((5,), 45)
    check_op(lambda g, a, gm, b: g.group_norm(a, 5, gm, b), [x, gamma, beta],
             lambda a, gm, b: F.instance_norm(a, weight=gm, bias=b), tol=NORM_TOL)


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 7), (2, 16, 9, 11), (1, 2, 3, 4, 5)], ids=str)
def test_batch_norm_matches_torch_eval(device, shape):
    from helpers import check_op

    channels = shape[1]
    x = rand(shape, 46) * 2
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    mean, var = rand((channels,), 47), np.abs(rand((channels,), 48)) + 0.1
    gamma, beta = rand((channels,), 49), rand((channels,), 50)
    check_op(lambda g, *a: g.batch_norm(*a, eps=1e-3), [x, mean, var, gamma, beta],
             lambda *a: F.batch_norm(*a[:3], weight=a[3], bias=a[4], training=False, eps=1e-3), tol=NORM_TOL)


def test_batch_norm_spells_out_a_zero_or_negative_variance(device):
    from helpers import check_op

    x = rand((1, 4, 3), 51)
    mean = np.array([0.0, 0.0, x[0, 2, 0], 1.0], np.float32)
    var = np.array([-1e-3, -2.0, -1e-3, np.nan], np.float32)  # + eps: 0, < 0, 0 with x = mean, NaN
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    out = check_op(lambda g, *a: g.batch_norm(*a, eps=1e-3), [x, mean, var, ones, zeros])
    y = next(iter(out.values()))
    assert np.isinf(y[0, 0]).all() and np.isnan(y[0, 1]).all() and np.isnan(y[0, 2, 0])
    assert np.isnan(y[0, 3]).all()

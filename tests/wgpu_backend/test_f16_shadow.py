"""The f16 weight shadow (shadow.py) and the skinny GEMM that reads f16 weights (matmul_skinny).

GPU results are checked against float64 numpy with rigorous bounds: against the f16-rounded weights
within f32 accumulation error (``k * 2^-24 * |a| @ |w16|``), and against the f32 weights within f16
rounding on top (``2^-11 * |a| @ |w|``). Shapes are odd (n = 1, 3, 17, 255, 257 puts every other
weight row at an odd half-word). Edge values: f16 subnormals, +-65504, -0 must convert exactly;
NaN propagates; a finite weight beyond f16's range is an InputError. The automatic shadow is
exercised with RLX_WGPU_MAX_BINDING small enough that one weight exceeds the binding.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import rand
from hypothesis import given
from hypothesis import strategies as st

import rlxpy
from rlxpy import env
from rlxpy.errors import GraphError, InputError, LimitError
from rlxpy.ir.dtype import DType
from rlxpy.wgpu_backend import shadow, windows
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.debug import twin_of
from rlxpy.wgpu_backend.kernels.params import KERNELS
from rlxpy.wgpu_backend.lowering import matmul_skinny
from rlxpy.wgpu_backend.schedule import DeviceFacts

KIB = 1 << 10
U = 2.0**-24  # f32 unit roundoff
HALF_U = 2.0**-11  # f16 unit roundoff


def half(w: np.ndarray) -> np.ndarray:
    """The f16 copy's values: an f32 param rounded once more (f64 data would round twice)."""
    return w.astype(np.float32).astype(np.float16).astype(np.float64)


def check_bounds(y: np.ndarray, a: np.ndarray, w: np.ndarray, what: str) -> None:
    """y = a @ w read from an f16 copy of w: near a @ w16 (f32 accumulation) and a @ w (f16 rounding)."""
    a64 = a.astype(np.float64).reshape(-1, w.shape[0])
    y64 = y.astype(np.float64).reshape(a64.shape[0], -1)
    w16 = half(w)
    mag16 = np.abs(a64) @ np.abs(w16)
    err16 = np.abs(y64 - a64 @ w16)
    bound16 = (w.shape[0] + 4) * U * mag16 + 1e-30
    assert (err16 <= bound16).all(), f"{what}: vs f16 weights, {np.max(err16 - bound16):.3g} over the bound"
    err32 = np.abs(y64 - a64 @ w.astype(np.float64))
    bound32 = bound16 + HALF_U * (np.abs(a64) @ np.abs(w.astype(np.float64)))
    assert (err32 <= bound32).all(), f"{what}: vs f32 weights, {np.max(err32 - bound32):.3g} over the bound"
    assert err16.max() < err32.max() or err32.max() == 0, f"{what}: the f16 rounding should be visible"


def linear_graph(m_shape: tuple[int, ...], k: int, n: int, bias: bool = False, act: str | None = None):
    g = rlxpy.Graph("lin")
    x = g.input("x", [*m_shape, k])
    w = g.param("w", [k, n])
    y = g.linear(x, w, g.param("b", [n]), activation=act, name="y") if bias else g.matmul(x, w, name="y")
    g.output(y)
    return g


def compile_forced(g: rlxpy.Graph, **flags):
    with env.override(RLX_WGPU_F16_WEIGHTS=1, **flags):
        return rlxpy.compile(g)


# -- the forced shadow on odd shapes ------------------------------------------------------------------
@pytest.mark.parametrize("m_shape,k,n", [((1,), 1, 1), ((1,), 3, 17), ((3,), 17, 5), ((17,), 255, 33),
                                         ((2,), 64, 257), ((2, 3), 40, 255), ((33,), 19, 3)])
def test_forced_shadow_matmul_within_f32_and_f16_bounds(device, m_shape, k, n):
    exe = compile_forced(linear_graph(m_shape, k, n))
    assert list(exe.shadowed) == ["w"] and exe.graph["w"].dtype is DType.F16
    assert [s.kernel for s in exe.schedule.steps] == ["matmul_skinny"]
    w = rand((k, n), 1) / np.float32(np.sqrt(k))
    a = rand((*m_shape, k), 2)
    exe.set_param("w", w)
    y = exe.run({"x": a})["y"]
    assert y.shape == (*m_shape, n) and y.dtype == np.float32
    check_bounds(y, a, w, f"{m_shape}x{k}x{n}")


@pytest.mark.parametrize("act", [None, "relu", "gelu"])
def test_forced_shadow_linear_with_bias_and_activation_matches_torch(device, act):
    m, k, n = 19, 70, 129  # 19 rows: two row blocks of the skinny GEMM
    exe = compile_forced(linear_graph((m,), k, n, bias=True, act=act))
    w, b, a = rand((k, n), 3) / np.float32(np.sqrt(k)), rand((n,), 4), rand((m, k), 5)
    exe.set_param("w", w)
    exe.set_param("b", b)
    y = exe.run({"x": a})["y"]
    assert exe.schedule.steps[0].grid[1] == 2
    t = torch.from_numpy(a).double() @ torch.from_numpy(half(w)) + torch.from_numpy(b).double()
    t = {None: t, "relu": torch.relu(t), "gelu": torch.nn.functional.gelu(t)}[act]
    np.testing.assert_allclose(y, t.numpy(), rtol=1e-5, atol=2e-5)


def test_f16_weights_convert_exactly_subnormals_and_extremes_included(device):
    k, n = 12, 7  # odd n: rows alternate between word-aligned and odd half-word starts
    values = np.array([6.0e-8, -6.0e-8, 3.0e-5, -4.1e-5, 6.1e-5, 65504.0, -65504.0, -0.0, 0.0, 1.0 / 3,
                       -2.5, 1e-3], np.float32)
    w = np.resize(values, (k, n)).astype(np.float32)
    w[:, 3] = np.roll(values, 5)
    exe = compile_forced(linear_graph((k,), k, n))
    exe.set_param("w", w)
    y = exe.run({"x": np.eye(k, dtype=np.float32)})["y"]  # one-hot rows pick each weight row exactly
    np.testing.assert_array_equal(y, w.astype(np.float16).astype(np.float32))
    stored = exe.read_node("w")
    assert stored.dtype == np.float16 and stored.tobytes() == w.astype(np.float16).tobytes()  # -0 kept


def test_nan_and_inf_weights_propagate_like_torch(device):
    k, n = 5, 3
    w = rand((k, n), 6)
    w[1, 0], w[2, 2] = np.nan, np.inf
    exe = compile_forced(linear_graph((2,), k, n))
    exe.set_param("w", w)
    a = rand((2, k), 7)
    y = exe.run({"x": a})["y"]
    want = (torch.from_numpy(a).double() @ torch.from_numpy(half(w))).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert np.isnan(y[:, 0]).all() and np.isinf(y[:, 2]).all()


def test_a_finite_weight_beyond_f16_range_is_an_input_error(device):
    exe = compile_forced(linear_graph((1,), 4, 3))
    w = rand((4, 3), 8)
    w[2, 1] = 70000.0
    with pytest.raises(InputError, match=r"'w'.*f16.*70000.*\[2, 1\].*65504"):
        exe.set_param("w", w)
    w[2, 1] = 65519.0  # rounds down to 65504, not up to inf
    exe.set_param("w", w)
    assert exe.read_node("w")[2, 1] == 65504


def test_set_param_bytes_takes_f32_or_f16_bytes_and_names_both_lengths(device):
    k, n = 9, 5
    w = rand((k, n), 9)
    exe = compile_forced(linear_graph((3,), k, n))
    a = rand((3, k), 10)
    exe.set_param_bytes("w", w.tobytes())  # f32 bytes: rounded like set_param
    from_f32 = exe.run({"x": a})["y"]
    exe.set_param_bytes("w", w.astype(np.float16).tobytes())  # f16 bytes: stored as they are
    from_f16 = exe.run({"x": a})["y"]
    np.testing.assert_array_equal(from_f32, from_f16)
    check_bounds(from_f16, a, w, "bytes")
    with pytest.raises(InputError, match=r"expected 90 bytes \(or 180 bytes of f32: stored as an f16"):
        exe.set_param_bytes("w", b"\0" * 100)


# -- the automatic shadow: a weight larger than one binding ------------------------------------------------
def big_weight_graph():
    g = rlxpy.Graph("big_weight")
    x = g.input("x", [3, 64])
    w_big = g.param("w_big", [64, 300])  # 76,800 B of f32: over a 64 KiB binding, 38,400 B as f16
    h = g.relu(g.matmul(x, w_big, name="hm"), name="h")
    y = g.linear(h, g.param("w_small", [300, 17]), g.param("bias", [17]), activation="tanh", name="y")
    g.output(y, h)
    return g


def test_weight_over_the_binding_is_shadowed_automatically_and_runs_in_windows(device):
    with env.override(RLX_WGPU_MAX_BINDING=64 * KIB):
        exe = rlxpy.compile(big_weight_graph())
    assert list(exe.shadowed) == ["w_big"], "only the weight that does not fit is shadowed"
    assert exe.graph["w_small"].dtype is DType.F32 and exe.graph["w_big"].nbytes == 64 * 300 * 2
    schedule = exe.schedule
    assert schedule.window_size <= 64 * KIB < schedule.arena.size
    assert {s.kernel for s in schedule.steps if s.node == "hm"} >= {"matmul_skinny"}
    summary = exe.report().summary
    assert summary["shadow_params"] == 1 and summary["shadow_mib"] == pytest.approx(38400 / 2**20)
    assert summary["windows"] > 1 and "f16 shadow: 1 params, 0.0 MiB" in exe.report().text(1)
    w_big, w_small, bias = rand((64, 300), 11) / 8, rand((300, 17), 12) / 17, rand((17,), 13)
    for name, value in (("w_big", w_big), ("w_small", w_small), ("bias", bias)):
        exe.set_param(name, value)
    a = rand((3, 64), 14)
    out = exe.run({"x": a})
    h16 = np.maximum(a.astype(np.float64) @ half(w_big), 0)
    h32 = np.maximum(a.astype(np.float64) @ w_big, 0)
    np.testing.assert_allclose(out["h"], h16, rtol=1e-5, atol=1e-5)
    assert np.abs(out["h"] - h16).max() < np.abs(out["h"] - h32).max(), "h must come from the f16 copy"
    y = np.tanh(out["h"].astype(np.float64) @ w_small + bias)  # w_small stays f32
    np.testing.assert_allclose(out["y"], y, rtol=1e-5, atol=1e-5)


def test_f32_only_forbids_the_shadow_with_a_clear_error(device):
    with env.override(RLX_WGPU_MAX_BINDING=64 * KIB, RLX_WGPU_MATMUL_F32_ONLY=1), \
            pytest.raises(LimitError, match=r"hm \(MatMul\): weight w_big \(\[64, 300\] f32.*F32_ONLY"):
        rlxpy.compile(big_weight_graph())
    with env.override(RLX_WGPU_F16_WEIGHTS=1, RLX_WGPU_MATMUL_F32_ONLY=1):
        exe = rlxpy.compile(linear_graph((2,), 8, 8))
    (step,) = exe.schedule.steps
    assert exe.shadowed == {} and step.kernel == "matmul_skinny" and "w is f32" in step.source


def test_a_weight_too_big_even_as_f16_is_a_limit_error(device):
    g = rlxpy.Graph("huge")
    g.output(g.matmul(g.input("x", [2, 256]), g.param("w", [256, 300]), name="y"))  # 150 KiB as f16
    with env.override(RLX_WGPU_MAX_BINDING=64 * KIB), pytest.raises(
            LimitError, match=r"y \(MatMul\): weight w \(\[256, 300\] f32, 0.293 MiB\).*even as its f16"):
        rlxpy.compile(g)


def test_params_read_other_than_as_a_matmul_weight_keep_f32(device):
    g = rlxpy.Graph("shared")
    x = g.input("x", [6, 6])
    w = g.param("w", [6, 6])
    t = g.param("t", [6, 5])  # a graph output too
    v = g.param("v", [2, 6])  # read as the activation of a matmul
    y = g.add(g.matmul(x, w), w, name="y")  # w is also read by an add
    z = g.matmul(v, g.param("u", [6, 4]), name="z")
    g.output(y, z, t)
    exe = compile_forced(g)
    assert list(exe.shadowed) == ["u"]
    params = {"w": rand((6, 6), 15), "t": rand((6, 5), 16), "v": rand((2, 6), 17), "u": rand((6, 4), 18)}
    for name, value in params.items():
        exe.set_param(name, value)
    out = exe.run({"x": rand((6, 6), 19)})
    np.testing.assert_array_equal(out["t"], params["t"])
    check_bounds(out["z"], params["v"], params["u"], "z")


# -- extent, debug twin, f32 through the skinny kernel ------------------------------------------------------
def test_active_extent_runs_the_first_rows_of_a_shadowed_matmul(device):
    m, k, n = 40, 24, 9
    exe = compile_forced(linear_graph((m,), k, n))
    w, a = rand((k, n), 20), rand((m, k), 21)
    exe.set_param("w", w)
    full = exe.run({"x": a})["y"]
    assert exe.set_active_extent((5, m)) == 1
    assert exe.encoder.grids[0][1] == 1  # 3 row blocks shrink to 1
    part = exe.run({"x": a})["y"]
    np.testing.assert_array_equal(part[:5], full[:5])
    check_bounds(part[:5], a[:5], w, "extent")
    exe.set_active_extent(None)
    np.testing.assert_array_equal(exe.run({"x": a})["y"], full)


def test_nan_trace_twin_receives_the_f16_bytes(device):
    exe = compile_forced(linear_graph((2,), 5, 4))
    w = rand((5, 4), 22)
    w[3, 1] = 60000.0  # still finite as f16; times 1e35 it overflows f32
    exe.set_param("w", w)
    a = rand((2, 5), 23)
    a[1, 3] = 1e35
    found = exe.first_nan_node({"x": a})
    assert found is not None and found["node"] == "y" and found["inputs_finite"] and found["inf"] >= 1
    assert list(twin_of(exe).shadowed) == ["w"]


def test_f32_weights_through_the_skinny_kernel_match_torch(device, monkeypatch):
    monkeypatch.setattr(matmul_skinny, "SKINNY_F32", True)
    m, k, n = 17, 33, 255
    exe = rlxpy.compile(linear_graph((m,), k, n, bias=True, act="relu"))
    assert exe.shadowed == {} and exe.schedule.steps[0].kernel == "matmul_skinny"
    w, b, a = rand((k, n), 24), rand((n,), 25), rand((m, k), 26)
    exe.set_param("w", w)
    exe.set_param("b", b)
    y = exe.run({"x": a})["y"]
    want = torch.relu(torch.from_numpy(a) @ torch.from_numpy(w) + torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


# -- pure: which weights are shadowed (no GPU) -------------------------------------------------------------
def test_choose_shadows_only_what_does_not_fit_unless_forced():
    g = rlxpy.Graph("choice")
    x = g.input("x", [4, 100])
    h = g.matmul(x, g.param("w0", [100, 200]), name="h")  # 80,000 B
    y = g.matmul(h, g.param("w1", [200, 30]), name="y")  # 24,000 B
    g.output(y)
    graph = prepare(g)
    ids = {n.name: n.id for n in graph.nodes}
    assert shadow.choose(graph, 1 << 20, 256) == []
    assert shadow.choose(graph, 65536, 256) == [ids["w0"]]
    assert sorted(shadow.choose(graph, 1 << 20, 256, "force")) == [ids["w0"], ids["w1"]]
    assert shadow.choose(graph, 1 << 20, 256, "off") == []
    with pytest.raises(LimitError, match="even as its f16 shadow"):
        shadow.choose(graph, 40960, 256)
    shadowed, sources = shadow.apply(graph, [ids["w0"]])
    assert shadowed["w0"].dtype is DType.F16 and sources["w0"].dtype is DType.F32
    others = [n.type for n in graph.nodes if n.name != "w0"]
    assert [n.type for n in shadowed.nodes if n.name != "w0"] == others
    facts = DeviceFacts(max_binding=65536, storage_align=256, max_workgroup_storage=16384,
                        max_invocations=256)
    schedule = lower_graph(shadowed, facts)
    # 4 rows: both GEMMs take the skinny kernel, only h's reads its weight as f16
    skinny = {s.node: s for s in schedule.steps if s.kernel == "matmul_skinny"}
    assert "w is f16" in skinny["h"].source and "w is f32" in skinny["y"].source
    assert KERNELS["matmul_skinny"].params.unpack(skinny["h"].uniforms)["k"] == 100
    assert "@workgroup_size(32, 8, 1)" in skinny["h"].source  # 256 invocations: 8 row lanes


def test_skinny_row_lanes_respect_the_device_and_the_weight():
    def lanes(k, rows, invocations=1024, storage=32768):
        facts = DeviceFacts(max_invocations=invocations, max_workgroup_storage=storage)
        return matmul_skinny.row_lanes(k, rows, SimpleNamespace(facts=facts))

    assert lanes(8192, 1) == 32 and lanes(8192, 8) == 32 and lanes(8192, 16) == 16  # registers
    assert lanes(3, 1) == 4 and lanes(1, 1) == 1 and lanes(17, 2) == 32
    assert lanes(8192, 1, invocations=256) == 8 and lanes(8192, 1, storage=4096) == 16


def test_explicit_f16_weights_must_be_eligible(device):
    g = rlxpy.Graph("explicit")
    x = g.input("x", [2, 4])
    g.output(g.matmul(x, g.param("w", [4, 3]), name="y"), g.add(x, g.param("bias", [2, 4]), name="z"))
    exe = rlxpy.compile(g, f16_weights=["w"])
    assert list(exe.shadowed) == ["w"]
    with pytest.raises(GraphError, match=r"f16 weights \['bias'\]: not f32 2-D params read only as a"):
        rlxpy.compile(g, f16_weights=["bias"])


@given(st.integers(0, 1 << 22), st.lists(st.integers(0, 1 << 18), max_size=3), st.integers(1, 1 << 23),
       st.sampled_from([4, 32, 256]))
def test_shadow_rule_is_consistent(f32_bytes, others, cap, alignment):
    f32_bytes -= f32_bytes % 4
    needed = windows.shadow_needed(f32_bytes, others, cap, alignment)
    fits = windows.shadow_fits(f32_bytes, others, cap, alignment)
    assert needed or fits, "a weight that fits as f32 fits as f16"
    window = cap // alignment * alignment
    assert fits == (windows.binding_need([windows.f16_bytes(f32_bytes), *others], alignment) <= window)
    assert windows.f16_bytes(f32_bytes) * 2 in (f32_bytes, f32_bytes + 4)
    assert windows.shadow_needed(f32_bytes, others, cap + alignment, alignment) <= needed  # monotone

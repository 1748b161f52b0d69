"""Decode-path pattern fusion: same results with and without it, and the expected fused ops."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

import rlxpy
from rlxpy.ir import ops
from rlxpy.ir.passes.patterns import fuse_gguf_decode
from rlxpy.ir.reference import run_reference


def q8(rows: int, cols: int, seed: int) -> np.ndarray:
    w = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return quants.quantize(w, GGMLQuantizationType.Q8_0)


def block(rows: int = 1):
    hidden, ffn = 64, 96
    g = rlxpy.Graph("block")
    x = g.input("x", [rows, hidden])
    gamma = g.param("gamma", [hidden])
    params = {"gamma": np.random.default_rng(9).uniform(0.5, 1.5, hidden).astype(np.float32)}

    def weight(name, n, k, seed):
        params[name] = q8(n, k, seed)
        return g.param(name, list(params[name].shape), "u8")

    h = g.rms_norm(x, gamma, eps=1e-5, name="norm")
    gate = g.dequant_matmul_gguf(h, weight("wg", ffn, hidden, 1), "Q8_0", ffn, hidden, name="gate")
    up = g.dequant_matmul_gguf(h, weight("wu", ffn, hidden, 2), "Q8_0", ffn, hidden, name="up")
    act = g.mul(g.silu(gate, name="silu"), up, name="swiglu")
    down = g.dequant_matmul_gguf(act, weight("wd", hidden, ffn, 3), "Q8_0", hidden, ffn, name="down")
    y = g.add(x, down, name="resid")
    g.output(y)
    return g, params


def test_block_fuses_into_two_gemvs():
    g, _ = block()
    fused = fuse_gguf_decode(g)
    kinds = [type(n.op).__name__ for n in fused.nodes if not isinstance(n.op, (ops.Input, ops.Param))]
    assert kinds == ["FusedGgufMatMul", "FusedGgufMatMul"]
    first, second = (n for n in fused.nodes if isinstance(n.op, ops.FusedGgufMatMul))
    assert first.op.swiglu and first.op.eps == pytest.approx(1e-5) and not first.op.has_residual
    assert second.op.has_residual and not second.op.swiglu and second.op.eps == 0
    assert second.name == "resid"


@pytest.mark.parametrize("switch", [{}, {"norm": False}, {"swiglu": False}, {"residual": False}])
def test_fused_and_unfused_agree(switch):
    g, params = block()
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    want = run_reference(g, {"x": x}, params)["resid"]
    got = run_reference(fuse_gguf_decode(g, **switch), {"x": x}, params)["resid"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_prefill_rows_are_left_alone():
    g, _ = block(rows=16)
    fused = fuse_gguf_decode(g)
    assert not any(isinstance(n.op, ops.FusedGgufMatMul) for n in fused.nodes)


def test_norm_with_another_consumer_is_kept():
    g, params = block()
    g.output(g["norm"])
    fused = fuse_gguf_decode(g)
    assert any(isinstance(n.op, ops.RmsNorm) for n in fused.nodes)
    x = np.random.default_rng(5).standard_normal((1, 64)).astype(np.float32)
    want = run_reference(g, {"x": x}, params)
    got = run_reference(fused, {"x": x}, params)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_fused_graph_survives_json():
    g, params = block()
    fused = fuse_gguf_decode(g)
    back = rlxpy.Graph.from_json(fused.to_json())
    x = np.random.default_rng(6).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_array_equal(run_reference(back, {"x": x}, params)["resid"],
                                  run_reference(fused, {"x": x}, params)["resid"])


def test_a_residual_add_after_a_residual_add_is_not_folded_over_it():
    """(a + GEMV(x)) + b: the GEMV takes a as its residual; the second add stays an add."""
    g = rlxpy.Graph("two_adds")
    x, a, b = (g.input(name, [1, 64]) for name in "xab")
    params = {"w": q8(64, 64, 7)}
    mm = g.dequant_matmul_gguf(x, g.param("w", list(params["w"].shape), "u8"), "Q8_0", 64, 64, name="mm")
    g.output(g.add(g.add(a, mm, name="s1"), b, name="s2"))
    fused = fuse_gguf_decode(g)
    assert isinstance(fused["s1"].op, ops.FusedGgufMatMul) and fused["s1"].inputs[2] == fused["a"].id
    assert isinstance(fused["s2"].op, ops.Binary)
    rng = np.random.default_rng(8)
    feeds = {name: rng.standard_normal((1, 64)).astype(np.float32) for name in "xab"}
    want = run_reference(g, feeds, params)["s2"]
    np.testing.assert_allclose(run_reference(fused, feeds, params)["s2"], want, rtol=1e-5, atol=1e-5)

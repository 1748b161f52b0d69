"""FusedGgufMatMul on the GPU: a decoder block's GEMVs with RMSNorm, SwiGLU and the residual
folded in (ir/passes/patterns.py), against the reference of the unfused graph and torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_close
from test_quant_gguf import gguf_values, make_weights

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.ir.reference import run_reference


def block(qtype: str, rows: int, hidden: int, ffn: int):
    """rms_norm -> gate/up GEMVs -> silu(gate) * up -> down GEMV -> + x, and its params."""
    g = rlxpy.Graph("block")
    x = g.input("x", [rows, hidden])
    params = {"gamma": np.random.default_rng(9).uniform(0.5, 1.5, hidden).astype(np.float32)}
    gamma = g.param("gamma", [hidden])

    def weight(name, n, k, seed):
        params[name] = make_weights(qtype, n, k, seed)
        return g.param(name, list(params[name].shape), DType.U8)

    h = g.rms_norm(x, gamma, eps=1e-5, name="norm")
    gate = g.dequant_matmul_gguf(h, weight("wg", ffn, hidden, 1), qtype, ffn, hidden, name="gate")
    up = g.dequant_matmul_gguf(h, weight("wu", ffn, hidden, 2), qtype, ffn, hidden, name="up")
    act = g.mul(g.silu(gate, name="silu"), up, name="swiglu")
    down = g.dequant_matmul_gguf(act, weight("wd", hidden, ffn, 3), qtype, hidden, ffn, name="down")
    g.output(g.add(x, down, name="resid"))
    return g, params


def torch_block(x: np.ndarray, params: dict, qtype: str, hidden: int, ffn: int) -> np.ndarray:
    t = torch.from_numpy(x).double()
    w = {name: torch.from_numpy(gguf_values(params[name], qtype).astype(np.float64)).reshape(n, k)
         for name, n, k in (("wg", ffn, hidden), ("wu", ffn, hidden), ("wd", hidden, ffn))}
    h = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * torch.from_numpy(params["gamma"]).double()
    act = torch.nn.functional.silu(h @ w["wg"].T) * (h @ w["wu"].T)
    return (t + act @ w["wd"].T).numpy()


@pytest.mark.parametrize(("qtype", "rows", "hidden", "ffn"), [
    ("Q8_0", 1, 64, 96), ("Q4_K", 3, 256, 512), ("F16", 2, 75, 37), ("Q4_1", 8, 96, 64), ("F16", 1, 75, 37),
    ("Q4_1", 1, 576, 1536)])
def test_decoder_block_fuses_into_two_gemvs_matching_the_unfused_graph(device, qtype, rows, hidden, ffn,
                                                                      gemv_kernel):
    g, params = block(qtype, rows, hidden, ffn)
    x = np.random.default_rng(4).standard_normal((rows, hidden)).astype(np.float32)
    exe = rlxpy.compile(g)
    for name, value in params.items():
        exe.set_param_bytes(name, value.tobytes()) if value.dtype == np.uint8 else exe.set_param(name, value)
    assert [s.kernel for s in exe.schedule.steps] == [gemv_kernel, gemv_kernel]
    sources = [s.source for s in exe.schedule.steps]
    assert "const NORM: bool = true" in sources[0] and "const SWIGLU: bool = true" in sources[0]
    assert "const RESIDUAL: bool = true" in sources[1] and "const NORM: bool = false" in sources[1]
    # one x row with subgroups: x staged once, the norm's sum of squares by subgroupAdd (FAST_STAGE)
    fast = gemv_kernel == "quant_gguf_gemv" and rows == 1 and "subgroup" in device.features
    assert ["FAST_STAGE: bool = true" in source for source in sources] == [fast, fast]
    got = exe.run({"x": x})["resid"]
    want = run_reference(g, {"x": x}, params)["resid"]  # the unfused graph's reference
    scale = float(np.abs(want).max())
    assert_close(got, want, 1e-4, 1e-5 * scale, f"{qtype} fused block vs unfused reference")
    assert_close(got, torch_block(x, params, qtype, hidden, ffn), 1e-4, 1e-5 * scale, "vs torch")


def test_types_without_a_decoder_run_the_fused_op_on_the_host(device):
    """The same block on IQ4_NL weights (random blocks with sane f16 scales): host steps."""
    hidden, ffn = 64, 32
    shapes = {"wg": (ffn, hidden), "wu": (ffn, hidden), "wd": (hidden, ffn)}
    rng = np.random.default_rng(7)
    values = {"gamma": rng.uniform(0.5, 1.5, hidden).astype(np.float32)}
    for name, (n, k) in shapes.items():
        blocks = rng.integers(0, 256, (n * k // 32, 18), dtype=np.uint8)
        blocks[:, :2] = np.full((len(blocks), 1), 0.01, np.float16).view(np.uint8)
        values[name] = blocks.reshape(n, k // 32 * 18)
    g = rlxpy.Graph("iq")
    x = g.input("x", [1, hidden])
    w = {name: g.param(name, values[name].shape, DType.U8) for name in shapes}
    h = g.rms_norm(x, g.param("gamma", [hidden]), eps=1e-5)
    act = g.mul(g.silu(g.dequant_matmul_gguf(h, w["wg"], "IQ4_NL", ffn, hidden)),
                g.dequant_matmul_gguf(h, w["wu"], "IQ4_NL", ffn, hidden))
    g.output(g.add(x, g.dequant_matmul_gguf(act, w["wd"], "IQ4_NL", hidden, ffn), name="y"))
    exe = rlxpy.compile(g)
    for name, value in values.items():
        exe.set_param_bytes(name, value.tobytes()) if value.dtype == np.uint8 else exe.set_param(name, value)
    assert [(s.kind, s.kernel) for s in exe.schedule.steps] == [("host", "gguf_fused_matmul")] * 2
    xv = rng.standard_normal((1, hidden)).astype(np.float32)
    assert_close(exe.run({"x": xv})["y"], run_reference(g, {"x": xv}, values)["y"], 1e-5, 1e-5, "IQ4_NL")

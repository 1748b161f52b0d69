"""A ResNet shortcut in the conv epilogue (Conv's ``residual``, made by the conv_epilogue pattern):
conv -> add(bias) -> add(shortcut) -> relu as one step on every conv kernel (direct, implicit GEMM,
its split-K sum, Winograd), bit-identical to the unfused steps (the kernels add the bias, then the
shortcut, in f32, in the same order) and within rtol = atol = 1e-4 of torch's float64 conv.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import TOL, assert_close, rand

import rlxpy
from rlxpy import env
from rlxpy.wgpu_backend.lowering import conv as conv_lowering
from rlxpy.wgpu_backend.lowering import conv_gemm, conv_winograd

#: (name, module, attribute, value, the conv step's kernels)
PATHS = [("direct", conv_lowering, "FORCE_PATH", "direct", ["conv_direct"]),
         ("gemm", conv_lowering, "FORCE_PATH", "gemm", ["conv_gemm"]),
         ("split", conv_gemm, "FORCE_SPLITS", 3, ["conv_gemm", "conv_split_sum"]),
         ("winograd", conv_winograd, "FORCE", "on", ["conv_winograd_operands",
                                                    "matmul_tiled", "conv_winograd_output"])]


def _block(shape: tuple[int, ...], channels: int) -> rlxpy.Graph:
    g = rlxpy.Graph("block")
    x = g.input("x", shape)
    y = g.conv(x, g.param("w", (channels, shape[1], 3, 3)), padding=1)
    y = g.add(g.add(y, g.param("b", (1, channels, 1, 1))), g.input("r", (shape[0], channels) + shape[2:]))
    g.output(g.relu(y, name="y"))
    return g


@pytest.mark.parametrize("path", PATHS, ids=[p[0] for p in PATHS])
def test_shortcut_add_and_relu_run_in_the_conv_step(device, monkeypatch, path):
    _, module, attr, value, kernels = path
    monkeypatch.setattr(module, attr, value)
    shape, channels = (3, 5, 7, 9), 17
    g = _block(shape, channels)
    params = {"w": rand((channels, 5, 3, 3), 1) / 7, "b": rand((1, channels, 1, 1), 2)}
    feeds = {"x": rand(shape, 3, low=-1.0, high=1.0), "r": rand((3, channels, 7, 9), 4)}
    feeds["r"][0, 2, 3, 4] = np.nan  # a shortcut's NaN reaches its own output only
    exes = []
    for skip in ("", "conv_epilogue"):
        with env.override(RLX_WGPU_SKIP_PATTERNS=skip):
            exes.append(rlxpy.compile(g))
        for name, v in params.items():
            exes[-1].set_param(name, v)
    fused, plain = exes
    assert [s.kernel for s in fused.schedule.steps] == kernels
    got = fused.run(feeds)["y"]
    np.testing.assert_array_equal(got, plain.run(feeds)["y"])
    t = {k: torch.from_numpy(v).double() for k, v in {**params, **feeds}.items()}
    want = torch.relu(F.conv2d(t["x"], t["w"], t["b"].flatten(), padding=1) + t["r"]).float().numpy()
    assert_close(got, want, *TOL["matmul"], f"{path[0]}: fused shortcut vs torch")
    assert np.isnan(got).sum() == 1

"""ONNX import of DFT (opset 17 and 20) and STFT, each checked against onnx's ReferenceEvaluator on
hand-built models: real and complex inputs, forward and inverse, onesided, dft_length cutting and
zero-padding, any axis; complex STFT signals are refused naming the node. No host step."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import rlxpy
from rlxpy.errors import UnsupportedOpError
from rlxpy.frontends.onnx import OnnxModel
from rlxpy.ir import ops

F32 = TensorProto.FLOAT


def _model(nodes, inputs, initializers=None, opset=20):
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "signal", [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
                              [helper.make_tensor_value_info("y", F32, None)], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, x: np.ndarray) -> OnnxModel:
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    imported = OnnxModel(model)
    got = imported.run({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    graph = imported.import_graph({"x": x.shape}).graph
    assert any(isinstance(n.op, (ops.Fft, ops.Stft)) for n in graph.nodes)
    assert rlxpy.compile(graph).report().summary["host_steps"] == 0
    return imported


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# an inverse one-sided DFT (irfft) takes complex input: channels 2 only
DFT_KINDS = [(0, 0, None), (0, 1, None), (1, 0, None), (0, 0, 12), (1, 0, 30), (1, 1, None), (1, 1, 17)]
DFT_CASES = [(channels, *kind) for channels in (1, 2) for kind in DFT_KINDS
             if not (kind[0] and kind[1] and channels == 1)]


@pytest.mark.parametrize("channels, inverse, onesided, length", DFT_CASES)
def test_dft_opset20(device, channels, inverse, onesided, length):
    x = _rand((2, 21, channels), 1)
    inputs = ["x", "len" if length else ""]
    init = {"len": np.array(length, np.int64)} if length else {}
    node = helper.make_node("DFT", inputs, ["y"], inverse=inverse, onesided=onesided)
    _check(_model([node], [("x", list(x.shape))], init), x)


def test_dft_along_another_axis_and_opset17(device):
    x = _rand((5, 6, 3, 2), 2)
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=1)
    _check(_model([node], [("x", list(x.shape))], {"axis": np.array(0, np.int64)}), x)
    x = _rand((3, 16, 1), 3)
    _check(_model([helper.make_node("DFT", ["x"], ["y"], axis=1, onesided=1)], [("x", list(x.shape))],
                  opset=17), x)


@pytest.mark.parametrize("onesided, window", [(1, True), (0, False)])
def test_stft(device, onesided, window):
    x = _rand((2, 300, 1), 4)
    init = {"step": np.array(24, np.int64), "len": np.array(64, np.int64)}
    inputs = ["x", "step", "win" if window else "", "len"]
    if window:
        init["win"] = np.hanning(64).astype(np.float32)
    node = helper.make_node("STFT", inputs, ["y"], onesided=onesided)
    _check(_model([node], [("x", list(x.shape))], init, opset=17), x)


def test_a_complex_stft_signal_is_refused():
    x = _rand((1, 50, 2), 5)
    node = helper.make_node("STFT", ["x", "step"], ["y"], name="spec")
    model = _model([node], [("x", list(x.shape))], {"step": np.array(8, np.int64)}, opset=17)
    with pytest.raises(UnsupportedOpError, match=r"spec.*STFT takes a real signal \[batch, length, 1\]"):
        OnnxModel(model).run({"x": x})

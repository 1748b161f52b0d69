"""Real CNNs through both front doors: resnet18 and mobilenet_v3_small (weights=None, seeded, with
non-trivial batch norm statistics) and a 1-D audio CNN, each via torch.compile(backend="rlxpy") and via
torch.onnx.export -> rlxpy's ONNX import; logits within 1e-4 of eager torch relative to their
largest magnitude. Small inputs (64 x 64 images, 4096 samples, batch 2)
keep lavapipe's time down. Every step runs on the GPU once the conv family has kernels (asserted
from the lowering registry, never skipped)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from cnn_models import build

from rlxpy.frontends.onnx import OnnxModel
from rlxpy.frontends.torch_fx import compiled_graphs, make_backend
from rlxpy.ir import ops
from rlxpy.wgpu_backend import lowering  # noqa: F401  (registers every lowerer)
from rlxpy.wgpu_backend.compiler import lower_graph, prepare
from rlxpy.wgpu_backend.lowering import conv as conv_lowering
from rlxpy.wgpu_backend.schedule import LOWERERS, DeviceFacts

RTOL = 1e-4
CONV_OPS = (ops.Conv, ops.ConvTranspose, ops.Pool, ops.AdaptivePool)
#: Whether the conv family runs on the GPU; while it does not, its ops are the only host steps.
CONV_ON_GPU = all(op in LOWERERS and op not in conv_lowering.HOST_OPS for op in CONV_OPS)


def _inputs(name: str) -> list[torch.Tensor]:
    """Two batches (one for resnet18, whose 3x3 convs on 512 channels take lavapipe seconds a run)."""
    generator = torch.Generator().manual_seed(7)
    shape = (2, 1, 4096) if name == "audio_cnn" else (2, 3, 64, 64)
    return [torch.randn(shape, generator=generator) for _ in range(1 if name == "resnet18" else 2)]


def _close(got: np.ndarray, want: torch.Tensor, what: str) -> None:
    want_np = want.numpy()
    error = float(np.abs(got - want_np).max() / np.abs(want_np).max())
    assert got.shape == want_np.shape and error <= RTOL, f"{what}: relative error {error:.2e}"


def _check_host_steps(graph, steps, what: str) -> None:
    """No host step, or (while the conv family has no kernels) host steps of conv-family ops only."""
    host = {type(graph[s.node].op) for s in steps if s.kind == "host"}
    allowed = set() if CONV_ON_GPU else set(CONV_OPS)
    assert host <= allowed, f"{what}: host steps of {sorted(op.__name__ for op in host - allowed)}"


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "audio_cnn"])
def test_torch_compile_matches_eager(device, name):
    model = build(name)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=make_backend("error"))
    with torch.no_grad():
        for i, x in enumerate(_inputs(name)):
            _close(compiled(x).numpy(), model(x), f"{name} input {i}")
    graph = compiled_graphs()[-1]
    assert graph.eager_calls == 0 and not any(isinstance(n.op, ops.BatchNorm) for n in graph.graph.nodes)
    for exe in graph.executables.values():
        _check_host_steps(graph.graph, exe.schedule.steps, name)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "audio_cnn"])
def test_onnx_export_import_matches_eager(device, name):
    model = build(name)
    inputs = _inputs(name)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notes
        torch.onnx.export(model, (inputs[0],), buffer, opset_version=17, dynamo=False, input_names=["x"],
                          output_names=["logits"])
    imported = OnnxModel(buffer.getvalue())
    with torch.no_grad():
        for i, x in enumerate(inputs):
            _close(imported.run({"x": x.numpy()})["logits"], model(x), f"{name} input {i}")
    assert imported.compiles == 1
    graph = imported.import_graph({"x": tuple(inputs[0].shape)}).graph
    assert not any(isinstance(n.op, ops.BatchNorm) for n in graph.nodes)
    prepared = prepare(graph)  # the schedule run() compiled, lowered again without a device
    _check_host_steps(prepared, lower_graph(prepared, DeviceFacts()).steps, name)

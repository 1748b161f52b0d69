"""Device faults: limits refused at compile with the numbers, a lost device, a run that fails half
way. Each must end in a clear rlxpy error, and what is left must keep working."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

import rlxpy
from rlxpy import env
from rlxpy.errors import DeviceLostError, LimitError
from rlxpy.ir import ops
from rlxpy.wgpu_backend import device as device_module
from rlxpy.wgpu_backend.executable import WgpuExecutable
from rlxpy.wgpu_backend.host_step import host_steps
from rlxpy.wgpu_backend.schedule import LOWERERS

MIB = 1 << 20


def mlp_graph() -> rlxpy.Graph:
    g = rlxpy.Graph("faults")
    x, w = g.input("x", [4, 8]), g.input("w", [8, 3])
    g.output(g.add(g.relu(g.matmul(x, w, name="mm")), 1.0, name="y"))
    return g


def feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"x": (4, 8), "w": (8, 3)}
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def expected(values: dict[str, np.ndarray]) -> np.ndarray:
    return np.maximum(values["x"].astype(np.float64) @ values["w"], 0) + 1


def check(exe, seed: int) -> None:
    values = feeds(seed)
    np.testing.assert_allclose(exe.run(values)["y"], expected(values), rtol=1e-5, atol=1e-5)


# -- limits: refused at compile, with the sizes and the limit ----------------------------------------
def test_arena_past_the_max_buffer_size_is_a_limit_error_with_the_sizes(device):
    small = dataclasses.replace(device, limits={**device.limits, "max-buffer-size": MIB})
    g = rlxpy.Graph("big_arena")
    a, b = g.param("a", [200_000]), g.param("b", [200_000])
    g.output(g.add(a, b, name="s"))
    message = r"arena of \d+ B \(2\.\d MiB\) exceeds the device's max buffer size of 1048576 B \(1\.0 MiB"
    with pytest.raises(LimitError, match=message):
        WgpuExecutable(g, device=small)


def test_a_tensor_past_the_binding_limit_is_a_limit_error_with_the_sizes(device):
    """lavapipe's own limit (no cap): an element-wise op whose input and output cannot share one
    binding is refused at compile, before any buffer is made."""
    limit = device.limits["max-storage-buffer-binding-size"]
    g = rlxpy.Graph("wide")
    g.output(g.relu(g.input("x", [limit // 4 + 1024]), name="r"))
    need = 2 * (limit + 4096) / MIB
    with pytest.raises(LimitError, match=rf"r \(Activation\): its tensors need {need:.3f} MiB .* at most "
                                         rf"{limit / MIB:.3f} MiB"):
        rlxpy.compile(g)


@pytest.mark.parametrize(("cap", "message"), [
    (4096, r"y \(Binary\): its tensors need 0\.047 MiB .*at most 0\.004 MiB"),
    (100, r"binding cap \(100 B\) is below the offset alignment \(256 B\)"),
])
def test_a_small_binding_cap_is_a_limit_error_with_the_sizes(device, cap, message):
    g = rlxpy.Graph("capped")
    g.output(g.add(g.input("a", [4096]), g.input("b", [4096]), name="y"))
    with env.override(RLX_WGPU_MAX_BINDING=cap), pytest.raises(LimitError, match=message):
        rlxpy.compile(g)


# -- a lost device --------------------------------------------------------------------------------
@pytest.fixture
def own_device(device, monkeypatch):
    """get_device() makes a device for this test alone (the session's comes back afterwards)."""
    monkeypatch.setattr(device_module, "_CURRENT", None)
    fresh = device_module.get_device()
    assert fresh is not device
    return fresh


def test_a_run_on_a_destroyed_device_is_a_clear_error_and_a_new_compile_works(own_device):
    exe = rlxpy.compile(mlp_graph())
    assert exe.device is own_device
    check(exe, 0)
    own_device.device.destroy()
    for values in (feeds(0), feeds(1)):  # the same inputs (a pre-encoded run) and new ones
        with pytest.raises(DeviceLostError, match=r"run faults: the WebGPU device .* was lost \(destroyed"):
            exe.run(values)
    with pytest.raises(DeviceLostError, match="compile again"):
        WgpuExecutable(mlp_graph(), device=own_device)
    fresh = rlxpy.compile(mlp_graph())
    assert fresh.device is not own_device and fresh.device.lost is None
    check(fresh, 2)


def test_a_loss_rlxpy_did_not_see_is_found_by_the_probe(own_device):
    """A device lost outside rlxpy's hook (as a driver reset would): the failed upload is followed
    by a probe, which names the loss."""
    exe = rlxpy.compile(mlp_graph())
    check(exe, 0)
    type(own_device.device).destroy(own_device.device)  # wgpu's own destroy, not the wrapped one
    assert own_device.lost is None
    with pytest.raises(DeviceLostError, match="Parent device is lost"):
        exe.run(feeds(1))  # new inputs: the upload fails before anything is submitted
    assert own_device.lost is not None
    assert device_module.get_device() is not own_device


def test_a_loss_before_a_run_with_nothing_to_upload_is_probed_not_a_crash(own_device):
    """The same inputs again: nothing is uploaded, so no wgpu call meets the loss before the submit,
    which would abort the process in wgpu-native; the run probes the device first."""
    exe = rlxpy.compile(mlp_graph())
    check(exe, 0)
    type(own_device.device).destroy(own_device.device)
    with pytest.raises(DeviceLostError, match="lost"):
        exe.run(feeds(0))
    assert own_device.lost is not None


def test_torch_compile_recompiles_on_a_new_device_after_a_loss(own_device):
    import torch  # a test dependency: missing is a failure, not a skip

    from rlxpy.frontends.torch_fx import compiled_graphs, make_backend

    torch._dynamo.reset()
    layer = torch.nn.Linear(8, 3)
    compiled = torch.compile(layer, backend=make_backend("error"))
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-5)
        own_device.device.destroy()
        torch.testing.assert_close(compiled(x + 1), layer(x + 1), rtol=1e-5, atol=1e-5)
    graph = compiled_graphs()[-1]
    assert graph.compiles == 2 and graph.eager_calls == 0
    assert next(iter(graph.executables.values())).device is not own_device
    torch._dynamo.reset()


# -- a run that fails half way ----------------------------------------------------------------------
@pytest.fixture
def flaky_host_matmul(monkeypatch):
    """MatMul as a host step that raises the exceptions put in the returned list, one per run."""
    failures: list[BaseException] = []

    def lower(node, ctx):
        (step,) = host_steps(node, ctx)

        def run(io) -> None:
            if failures:
                raise failures.pop()
            step.host(io)
        return [dataclasses.replace(step, host=run)]

    monkeypatch.setitem(LOWERERS, ops.MatMul, lower)
    return failures


@pytest.mark.parametrize("error", [ValueError("host step failed"), KeyboardInterrupt()])
def test_a_host_step_that_raises_leaves_the_executable_usable(device, flaky_host_matmul, error):
    exe = rlxpy.compile(mlp_graph())
    assert [s.kind for s in exe.schedule.steps][0] == "host"
    check(exe, 0)
    flaky_host_matmul.append(error)
    with pytest.raises(type(error)) as caught:
        exe.run(feeds(1))
    if isinstance(error, Exception) and sys.version_info >= (3, 11):  # the note names the step
        assert caught.value.__notes__ == ["in rlxpy host step host_MatMul:mm"]
    check(exe, 1)  # the same inputs as the failed run
    check(exe, 2)


@pytest.mark.parametrize("host", [False, True])
def test_a_failed_readback_leaves_the_executable_usable(device, request, monkeypatch, host):
    """On the GPU only (a pre-encoded run) and with a host step (a run that reads back at its end)."""
    if host:
        request.getfixturevalue("flaky_host_matmul")
    exe = rlxpy.compile(mlp_graph())
    assert ("host" in [s.kind for s in exe.schedule.steps]) == host
    check(exe, 0)
    map_staging = exe.arena.map_staging
    broken = [RuntimeError("readback failed")]

    def failing(*args, **kwargs):
        if broken:
            raise broken.pop()
        return map_staging(*args, **kwargs)

    monkeypatch.setattr(exe.arena, "map_staging", failing)
    with pytest.raises(RuntimeError, match="readback failed"):
        exe.run(feeds(1))
    check(exe, 1)
    check(exe, 0)

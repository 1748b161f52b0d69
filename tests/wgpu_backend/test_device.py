"""Adapter choice: a real GPU first, then lavapipe (CPU Vulkan), then GL; the reason is printed."""

from __future__ import annotations

from rlxpy.cli import main
from rlxpy.wgpu_backend.device import adapter_rank


def info(device: str, backend: str, kind: str) -> dict:
    return {"device": device, "backend_type": backend, "adapter_type": kind}


def test_hardware_beats_lavapipe_beats_gl():
    adapters = [info("llvmpipe", "OpenGL", "CPU"), info("llvmpipe", "Vulkan", "CPU"),
                info("iGPU", "Vulkan", "IntegratedGPU"), info("old GPU", "OpenGL", "DiscreteGPU"),
                info("H100", "Vulkan", "DiscreteGPU"), info("M2", "Metal", "IntegratedGPU")]
    ranked = [a["device"] for a in sorted(adapters, key=adapter_rank)]
    assert ranked == ["H100", "iGPU", "M2", "old GPU", "llvmpipe", "llvmpipe"]
    assert sorted(adapters[:2], key=adapter_rank)[0]["backend_type"] == "Vulkan"


def test_info_names_the_adapter_and_why(device, capsys):
    assert main(["info", "--context", "256"]) == 0
    out = capsys.readouterr().out
    assert f"adapter {device.name}" in out
    assert "best of" in out or "RLX_WGPU_ADAPTER" in out
    if device.is_cpu:
        assert "a GPU driver" in out

"""Shared fixtures. A missing WebGPU adapter is a failure, never a skip."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def device():
    from rlxpy.wgpu_backend.device import get_device

    try:
        return get_device()
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"no WebGPU adapter ({e}); `make test` installs mesa-vulkan-drivers (lavapipe)")

"""Shared fixtures. A missing WebGPU adapter is a failure, never a skip."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))

# Property tests explore the same examples on every run, so CI is reproducible; run with
# HYPOTHESIS_PROFILE=explore locally to search fresh examples.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def device():
    from rlxpy.wgpu_backend.device import get_device

    try:
        return get_device()
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"no WebGPU adapter ({e}); `make test` installs mesa-vulkan-drivers (lavapipe)")


#: `make test` reruns the op suite on llvmpipe's GL (RLX_WGPU_ADAPTER=OpenGL) to catch kernels that lean
#: on one backend's behaviour. llvmpipe's GL compiles a few large kernels for minutes on two cores (an
#: attention backward with 200-dim heads: ~3 min). Cases marked ``gl_deselect`` differ from the GL run's
#: other cases of the same kernels only in compile-time sizes (head-dim groups, mask broadcasts) or are
#: whole models over kernels tested on their own; the GL rerun deselects them (Vulkan runs them all).
ON_GL = "opengl" in os.environ.get("RLX_WGPU_ADAPTER", "").lower()


def pytest_configure(config):
    config.addinivalue_line("markers", "gl_deselect: left out of the op suite's rerun on GL (see conftest)")


def pytest_collection_modifyitems(config, items):
    if not ON_GL:
        return
    dropped = [item for item in items if item.get_closest_marker("gl_deselect")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("gl_deselect")]


#: Kernel variants the variant-parametrised tests run (RLXPY_TEST_KERNELS, default both). `make test`
#: reruns the op suite on llvmpipe's GL with "gpu" only: a GL adapter that is a real GPU runs the
#: workgroup-cooperative variants, and the CPU variants are covered on lavapipe.
KERNEL_VARIANTS = os.environ.get("RLXPY_TEST_KERNELS", "gpu,cpu").split(",")


@pytest.fixture(params=KERNEL_VARIANTS)
def gemv_kernel(request):
    """Runs a test under both GGUF GEMV variants (RLX_WGPU_KERNELS); yields the kernel name to expect."""
    from rlxpy import env

    with env.override(RLX_WGPU_KERNELS=request.param):
        yield {"gpu": "quant_gguf_gemv", "cpu": "quant_gguf_rows"}[request.param]


@pytest.fixture
def gpu_variant():
    """Pins the workgroup-cooperative kernel variants (tests of their work split)."""
    from rlxpy import env

    with env.override(RLX_WGPU_KERNELS="gpu"):
        yield

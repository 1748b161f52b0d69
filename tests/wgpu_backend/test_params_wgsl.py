"""Every uniform layout declared in Python matches the struct its .wgsl file writes out."""

from __future__ import annotations

import pytest

from rlxpy.wgpu_backend import lowering  # noqa: F401  (registers every kernel)
from rlxpy.wgpu_backend.kernels.params import KERNEL_DIR, KERNELS, parse_wgsl_structs


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_layout_matches_wgsl_struct(name):
    kernel = KERNELS[name]
    structs = parse_wgsl_structs((KERNEL_DIR / f"{name}.wgsl").read_text())
    assert kernel.params.name in structs, f"{name}.wgsl does not declare struct {kernel.params.name}"
    assert structs[kernel.params.name] == kernel.params.fields, (
        f"{name}.wgsl struct {kernel.params.name} differs from the Python layout")


def test_every_wgsl_file_is_a_declared_kernel():
    files = {p.stem for p in KERNEL_DIR.glob("*.wgsl")}
    assert files == set(KERNELS), f"undeclared: {files - set(KERNELS)}, missing: {set(KERNELS) - files}"


def test_every_op_has_a_reference_and_a_lowering_or_a_reason():
    from rlxpy.ir import ops
    from rlxpy.ir.reference import REFERENCE, _load_families
    from rlxpy.wgpu_backend.schedule import LOWERERS, NOT_LOWERED

    _load_families()
    leaves_and_views = (ops.Input, ops.Param, ops.Constant, ops.Reshape)
    for op in ops.ALL_OPS:
        if op in leaves_and_views:
            continue
        assert op in REFERENCE, f"{op.__name__} has no reference implementation"
        if not op.composite:
            assert op in LOWERERS or op in NOT_LOWERED, f"{op.__name__}: no lowerer and no NOT_LOWERED reason"

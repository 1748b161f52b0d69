"""Every kernel's uniform struct is written from its Python layout (``#params``), never by hand."""

from __future__ import annotations

import pytest

from rlxpy.wgpu_backend import lowering  # noqa: F401  (registers every kernel)
from rlxpy.wgpu_backend.kernels.params import INCLUDE_DIR, KERNEL_DIR, KERNELS, parse_wgsl_structs


@pytest.mark.parametrize("path", sorted([*KERNEL_DIR.glob("*.wgsl"), *INCLUDE_DIR.glob("*.wgsl")]),
                         ids=lambda path: path.name)
def test_no_wgsl_file_writes_a_uniform_struct(path):
    """Kernels say ``#params`` (most through include/common_arena.wgsl); test_kernel_sources checks
    that every rendered kernel holds exactly its layout's struct and binds it."""
    assert not parse_wgsl_structs(path.read_text()), f"{path.name} writes a uniform struct by hand"


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_generator_writes_the_layout(name):
    layout = KERNELS[name].params
    # exactly the layout's fields, in order
    assert parse_wgsl_structs(layout.wgsl_struct()) == {layout.name: layout.fields}


def test_every_wgsl_file_is_a_declared_kernel():
    files = {p.stem for p in KERNEL_DIR.glob("*.wgsl")}
    assert files == set(KERNELS), f"undeclared: {files - set(KERNELS)}, missing: {set(KERNELS) - files}"


def test_every_op_has_a_reference_and_a_lowering_or_a_reason():
    from rlxpy.ir import ops
    from rlxpy.ir.reference import REFERENCE
    from rlxpy.wgpu_backend.schedule import LOWERERS, NOT_LOWERED

    leaves_and_views = (ops.Input, ops.Param, ops.Constant, ops.Reshape)
    for op in ops.ALL_OPS:
        if op in leaves_and_views:
            continue
        assert op in REFERENCE, f"{op.__name__} has no reference implementation"
        if not op.composite:
            assert op in LOWERERS or op in NOT_LOWERED, f"{op.__name__}: no lowerer and no NOT_LOWERED reason"

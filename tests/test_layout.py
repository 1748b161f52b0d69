"""The op-family layout (issue 12): one vocabulary across ops, reference, lowering, kernels and tests.

Every op class lives in ``rlxpy/ir/ops/<family>.py``, its reference function in
``rlxpy/ir/reference/<family>.py`` and its lowerer in ``rlxpy/wgpu_backend/lowering/<family>.py``
(or a ``<family>_*.py`` sub-family module); kernels are ``kernels/<family>_*.wgsl`` and tests
``tests/ops/test_<family>*.py`` / ``tests/ir/test_reference_<family>*.py``. An op without a lowerer
is listed with a reason. Gradient rules (VJPs) live in ``rlxpy/ir/grad/<family>.py``, tested by
``tests/ir/test_grad_<family>*.py``.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import rlxpy.wgpu_backend.lowering  # noqa: F401  (registers every lowerer)
from rlxpy.ir import ops
from rlxpy.ir.grad import VJP
from rlxpy.ir.reference import REFERENCE
from rlxpy.wgpu_backend.kernels.params import KERNEL_DIR, KERNELS
from rlxpy.wgpu_backend.schedule import LOWERERS, NOT_LOWERED

ROOT = Path(__file__).resolve().parents[1]
LOWERING_DIR = ROOT / "rlxpy" / "wgpu_backend" / "lowering"

#: Ops that never get a lowerer, and why.
NO_LOWERER = {
    "leaf": "bound by the executable (feeds, parameters, constants in the arena)",
    "Reshape": "a view: the memory planner aliases it to its input",
    "composite": "expanded into primitives by the unfuse pass before lowering",
}


def _family_module(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _in_family(module: str, family: str) -> bool:
    """``lowering.quant_gguf`` belongs to quant; ``lowering.quant`` too."""
    last = _family_module(module)
    return last == family or last.startswith(family + "_")


def test_every_op_is_in_a_family_module_and_in_the_ops_namespace():
    assert len(set(ops.FAMILIES)) == len(ops.FAMILIES)
    for cls in ops.ALL_OPS:
        assert cls.__module__ == f"rlxpy.ir.ops.{ops.family_of(cls)}", cls
        assert ops.family_of(cls) in ops.FAMILIES, cls
        assert getattr(ops, cls.__name__) is cls, f"ops.{cls.__name__} is not the registered class"
    files = {p.stem for p in (ROOT / "rlxpy" / "ir" / "ops").glob("*.py")} - {"__init__", "base"}
    assert files == set(ops.FAMILIES)
    assert {ops.family_of(cls) for cls in ops.ALL_OPS} == set(ops.FAMILIES), "a family without ops"


def test_every_reference_lives_in_its_family_module():
    files = {p.stem for p in (ROOT / "rlxpy" / "ir" / "reference").glob("*.py")} - {"__init__", "core"}
    assert files == set(ops.FAMILIES) - {"leaf"}
    for cls in ops.ALL_OPS:
        family = ops.family_of(cls)
        if family == "leaf":
            assert cls not in REFERENCE, "leaves are bound by run_reference itself"
            continue
        assert REFERENCE[cls].__module__ == f"rlxpy.ir.reference.{family}", cls


def _no_lowerer_reason(cls: type[ops.Op]) -> str | None:
    if ops.family_of(cls) == "leaf":
        return NO_LOWERER["leaf"]
    if cls in ops.VIEW_OPS:
        return NO_LOWERER[cls.__name__]
    if cls.composite:
        return NO_LOWERER["composite"]
    return None


def test_every_lowerer_lives_in_its_family_module_or_the_op_is_listed_with_a_reason():
    for cls in ops.ALL_OPS:
        family = ops.family_of(cls)
        reason = _no_lowerer_reason(cls)
        if reason is not None:
            assert cls not in LOWERERS and cls not in NOT_LOWERED, cls
            continue
        module = importlib.import_module(f"rlxpy.wgpu_backend.lowering.{family}")
        if cls in NOT_LOWERED:
            assert cls not in LOWERERS
            assert module.NOT_LOWERED_OPS[cls] == NOT_LOWERED[cls] and NOT_LOWERED[cls], cls
            continue
        lowerer = LOWERERS[cls]
        assert _in_family(lowerer.__module__, family), f"{cls.__name__} is lowered in {lowerer.__module__}"
        if lowerer.__name__.endswith("_on_host"):  # host steps: listed with the reason there is no kernel
            assert module.HOST_OPS[cls], cls


def test_host_tables_only_list_their_own_family():
    for family in ops.FAMILIES:
        path = LOWERING_DIR / f"{family}.py"
        if not path.exists():
            continue
        module = importlib.import_module(f"rlxpy.wgpu_backend.lowering.{family}")
        for table in ("HOST_OPS", "NOT_LOWERED_OPS"):
            for cls, reason in getattr(module, table, {}).items():
                assert ops.family_of(cls) == family and reason, (family, table, cls)


def test_lowering_modules_are_family_modules_all_imported_by_the_package():
    stems = {p.stem for p in LOWERING_DIR.glob("*.py")} - {"__init__"}
    for stem in stems:
        assert any(stem == f or stem.startswith(f + "_") for f in ops.FAMILIES), stem
    tree = ast.parse((LOWERING_DIR / "__init__.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert imported == stems & set(ops.FAMILIES)
    for stem in stems:  # no registration by a trailing import of another family
        tree = ast.parse((LOWERING_DIR / f"{stem}.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "rlxpy.wgpu_backend.lowering":
                family = next(f for f in ops.FAMILIES if stem == f or stem.startswith(f + "_"))
                names = [a.name for a in node.names]
                assert all(_in_family(name, family) for name in names), (stem, names)


def test_kernels_are_named_after_the_family_that_declares_them():
    declared = {}
    for path in LOWERING_DIR.glob("*.py"):
        for name in re.findall(r'\bkernel\(\s*"(\w+)"', path.read_text()):
            declared[name] = path.stem
    files = {p.stem for p in KERNEL_DIR.glob("*.wgsl")}
    assert set(declared) == files, "every .wgsl file is declared by one lowering module"
    for name, stem in declared.items():
        family = next(f for f in ops.FAMILIES if stem == f or stem.startswith(f + "_"))
        assert name.startswith(family + "_"), f"kernel {name} is declared in lowering/{stem}.py"
        assert name in KERNELS
    # includes are named after the family that uses them, or common_* when several families do
    for path in (KERNEL_DIR / "include").glob("*.wgsl"):
        assert any(path.stem.startswith(f + "_") for f in (*ops.FAMILIES, "common")), path.name


def test_every_gradient_rule_lives_in_its_family_module():
    files = {p.stem for p in (ROOT / "rlxpy" / "ir" / "grad").glob("*.py")} - {"__init__", "core"}
    assert files <= set(ops.FAMILIES), files - set(ops.FAMILIES)
    tree = ast.parse((ROOT / "rlxpy" / "ir" / "grad" / "__init__.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert files <= imported, "the package imports every family's rules"
    for cls, rule in VJP.items():
        assert rule.__module__ == f"rlxpy.ir.grad.{ops.family_of(cls)}", (cls, rule.__module__)


@pytest.mark.parametrize("folder, prefix", [("ops", "test_"), ("ir", "test_reference_"),
                                            ("ir", "test_grad_")])
def test_op_tests_are_named_after_families(folder, prefix):
    for path in (ROOT / "tests" / folder).glob(f"{prefix}*.py"):
        rest = path.stem[len(prefix):]
        assert any(rest == f or rest.startswith(f + "_") for f in ops.FAMILIES), path.name

"""docs/ops.md is generated from the op classes' docstrings and must be up to date; every class in
rlxpy/ir/ops has a docstring of its own, and every family module cites its section."""

from __future__ import annotations

import ast
from pathlib import Path

from rlxpy.ir import ops, ops_doc

OPS_DIR = Path(ops_doc.__file__).resolve().parent / "ops"


def test_docs_ops_md_is_up_to_date():
    assert ops_doc.DOC_PATH.is_file(), "docs/ops.md is missing: run python -m rlxpy.ir.ops_doc"
    assert ops_doc.DOC_PATH.read_text() == ops_doc.render(), \
        "docs/ops.md is out of date: run python -m rlxpy.ir.ops_doc"
    assert ops_doc.main(["--check"]) == 0


def test_every_class_in_the_ops_modules_has_a_docstring():
    missing = []
    for path in sorted(OPS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not ast.get_docstring(node):
                missing.append(f"{path.name}: {node.name}")
    assert not missing


def test_every_op_and_family_is_in_the_document():
    text = ops_doc.render()
    for family in ("base", *ops.FAMILIES):
        assert f"\n## {family}\n" in text, family
        source = (OPS_DIR / f"{family}.py").read_text()
        cited = f"docs/ops.md#{family}" in ast.get_docstring(ast.parse(source))
        assert cited, f"{family}.py does not cite its section"
    for name in ops.OP_TYPES:
        assert f"\n### {name}\n" in text, name

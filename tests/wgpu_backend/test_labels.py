"""Every pipeline, bind group and compute pass rlxpy creates carries a label naming its step(s), so
that a wgpu error names the node (checked on the source with ast, and on a compiled executable)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import rlxpy

BACKEND = Path(__file__).resolve().parents[2] / "rlxpy" / "wgpu_backend"
LABELLED = ("create_bind_group", "begin_compute_pass", "create_compute_pipeline", "create_shader_module",
            "create_pipeline_layout", "create_bind_group_layout", "create_command_encoder")


def test_every_wgpu_object_rlxpy_creates_has_a_label():
    unlabelled, seen = [], set()
    for path in sorted(BACKEND.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr in LABELLED:
                seen.add(node.func.attr)
                if not any(k.arg == "label" for k in node.keywords):
                    unlabelled.append(f"{path.relative_to(BACKEND)}:{node.lineno}: {node.func.attr}")
    assert seen == set(LABELLED) and not unlabelled, unlabelled


def test_the_labels_name_the_steps(device):
    g = rlxpy.Graph("labels")
    x = g.input("x", [4])
    g.output(g.exp(g.relu(x, name="first_node"), name="last_node"))
    exe = rlxpy.compile(g)
    exe.run({"x": np.ones(4, np.float32)})
    steps = exe.schedule.steps
    assert all(s.label == f"{s.kernel}:{s.node}" for s in steps)
    assert exe.encoder.bind_group.label.startswith(f"rlx_bind:{steps[0].label}..{steps[-1].label}")
    segment = next(s for s in exe.encoder.segments if s.kind == "gpu")
    pipeline = segment.dispatches[0][0]
    assert pipeline.label.split(":")[0] == steps[0].kernel

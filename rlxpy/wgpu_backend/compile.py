"""``rlxpy.compile``: a static graph compiles now, one with symbolic dims per binding (dynamic.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlxpy.ir.graph import Graph
from rlxpy.wgpu_backend.dynamic import DeferredExecutable
from rlxpy.wgpu_backend.executable import WgpuExecutable


def compile_graph(graph: Graph, bindings: Mapping[str, int] | None = None,
                  **options: Any) -> WgpuExecutable | DeferredExecutable:
    """Static graphs compile now; graphs with symbolic dims compile per binding."""
    if bindings or not graph.is_static():
        return DeferredExecutable(graph, bindings, **options)
    return WgpuExecutable(graph, **options)

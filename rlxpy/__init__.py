"""rlxpy: compile ML graphs to a schedule of WebGPU dispatches over one arena buffer."""

from rlxpy.errors import (
    GraphError,
    InputError,
    KernelError,
    LimitError,
    ModelError,
    RlxError,
    UnsupportedOpError,
)
from rlxpy.ir import DType, Graph, Node, Sym, ops

__version__ = "0.1.0"


def compile(graph: Graph, bindings: dict[str, int] | None = None, **options):  # noqa: A001
    """Compile ``graph`` for the WebGPU device; returns an Executable (lazy if dims are symbolic)."""
    from rlxpy.wgpu_backend.compile import compile_graph
    return compile_graph(graph, bindings=bindings, **options)


__all__ = [
    "DType", "Graph", "GraphError", "InputError", "KernelError", "LimitError", "ModelError", "Node",
    "RlxError", "Sym", "UnsupportedOpError", "compile", "ops",
]

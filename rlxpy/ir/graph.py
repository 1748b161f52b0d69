"""Graph: the graph container (graph_core.GraphCore) with every builder method, and its text forms.

Build a graph with the builder methods (builder.py: the core families; builder_extra.py: conv,
signal, scan, custom, backward, regions; builder_composite.py: composites and control flow), mark
outputs, compile it. ``str(graph)`` lists it, ``to_json`` / ``Graph.from_json`` round-trip it
(serialize.py). Node, NodeRef and describe are re-exported from graph_core.
"""

from __future__ import annotations

from typing import Self

from rlxpy.ir import serialize
from rlxpy.ir.builder import Builder
from rlxpy.ir.builder_composite import BuilderComposite
from rlxpy.ir.builder_extra import BuilderExtra
from rlxpy.ir.graph_core import GraphCore, Node, NodeRef, describe


class Graph(Builder, BuilderExtra, BuilderComposite):
    """An IR graph. Build it with the methods of :class:`Builder`, mark outputs, compile it."""

    def __str__(self) -> str:
        return serialize.pretty(self)

    def to_json(self) -> str:
        return serialize.to_json(self)

    @classmethod
    def from_json(cls, text: str) -> Self:
        return serialize.from_json(text, cls)


__all__ = ["Graph", "GraphCore", "Node", "NodeRef", "describe"]

"""Node and the graph container: a topologically ordered list of typed nodes.

Nodes are appended in order, so a node's inputs always have smaller ids. :meth:`GraphCore.apply`
runs the op's shape rule and names errors after the node:
``"blk0.attn (Attention): num_heads 9 is not a multiple of num_kv_heads 2"``. The builder mixins
(builder.py, builder_extra.py, builder_composite.py) derive from GraphCore, and graph.py composes
them into Graph; this module imports neither, so the layers are: ops -> graph_core -> builders ->
serialize -> graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np

from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType, to_storage
from rlxpy.ir.shape import Shape, as_shape, format_shape, is_static, numel, symbols


@dataclass(frozen=True, eq=False)
class Node:
    """One op application. ``inputs`` are node ids; ``type`` is the inferred output type."""

    id: int
    op: ops.Op
    inputs: tuple[int, ...]
    type: ops.TensorType
    name: str

    @property
    def shape(self) -> Shape:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return len(self.type.shape)

    @property
    def numel(self) -> int:
        return numel(self.type.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"%{self.id} {self.name}: {type(self.op).__name__} -> {self.type}"


NodeRef = Node | int


class GraphCore:
    """The graph container: nodes in order, outputs, names. ``apply`` appends a node; the builder
    mixins (builder*.py) add one method per op on top, and graph.Graph composes them."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.nodes: list[Node] = []
        self.outputs: list[int] = []
        self._by_name: dict[str, Node] = {}
        self._counters: dict[str, int] = {}

    # -- building ---------------------------------------------------------------------------
    def apply(self, op: ops.Op, inputs: Sequence[NodeRef] = (), name: str | None = None) -> Node:
        """Append ``op`` applied to ``inputs``; runs the shape rule, raises GraphError on misuse."""
        if not isinstance(op, ops.Op):
            raise GraphError(f"{name or '?'}: {op!r} is not an IR op")
        name = self._fresh_name(op, name)
        ids = tuple(self._id(x, name, op) for x in inputs)
        try:
            op.check_arity(len(ids))
            out_type = op.infer([self.nodes[i].type for i in ids])
        except GraphError as e:
            shapes = ", ".join(str(self.nodes[i].type) for i in ids)
            raise GraphError(f"{name} ({type(op).__name__}): {e} [inputs: {shapes or 'none'}]") from None
        node = Node(len(self.nodes), op, ids, out_type, name)
        self.nodes.append(node)
        self._by_name[name] = node
        return node

    def input(self, name: str, shape: Iterable, dtype: DType | str = DType.F32) -> Node:
        return self.apply(ops.Input(name, as_shape(shape), DType.parse(dtype)), (), name)

    def param(self, name: str, shape: Iterable, dtype: DType | str = DType.F32) -> Node:
        return self.apply(ops.Param(name, as_shape(shape), DType.parse(dtype)), (), name)

    def constant(
        self,
        value: np.ndarray | float | int | Sequence,
        dtype: DType | str | None = None,
        name: str | None = None,
    ) -> Node:
        array = np.asarray(value)
        if dtype is None:
            dtype = DType.F32 if array.dtype.kind == "f" else DType.parse(array.dtype)
        dtype = DType.parse(dtype)
        data = to_storage(array.astype(dtype.numpy) if dtype is not DType.BF16 else array, dtype).tobytes()
        return self.apply(ops.Constant(data, tuple(array.shape), dtype), (), name)

    def output(self, *nodes: NodeRef) -> Self:
        """Mark nodes as graph outputs (read back by ``run``)."""
        for x in nodes:
            node_id = self._id(x, "output", None)
            if node_id not in self.outputs:
                self.outputs.append(node_id)
        return self

    # -- queries ----------------------------------------------------------------------------
    def __getitem__(self, key: NodeRef | str) -> Node:
        if isinstance(key, str):
            if key not in self._by_name:
                raise KeyError(f"no node named {key!r} in graph {self.name!r}")
            return self._by_name[key]
        return self.nodes[key.id if isinstance(key, Node) else key]

    def __len__(self) -> int:
        return len(self.nodes)

    def inputs(self) -> list[Node]:
        return [n for n in self.nodes if isinstance(n.op, ops.Input)]

    def params(self) -> list[Node]:
        return [n for n in self.nodes if isinstance(n.op, ops.Param)]

    def consumers(self) -> dict[int, list[int]]:
        users: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                users[i].append(n.id)
        return users

    def symbols(self) -> set[str]:
        found: set[str] = set()
        for n in self.nodes:
            found |= symbols(n.shape)
        return found

    def is_static(self) -> bool:
        return all(is_static(n.shape) for n in self.nodes)

    def verify(self) -> Self:
        """Check order, wiring, names, outputs, and that every stored type still infers."""
        seen: set[str] = set()
        for n in self.nodes:
            if n.name in seen:
                raise GraphError(f"{n.name}: node name used twice")
            seen.add(n.name)
            if any(i >= n.id or i < 0 for i in n.inputs):
                raise GraphError(
                    f"{n.name} ({type(n.op).__name__}): input ids {n.inputs} not before node {n.id}"
                )
            try:
                again = n.op.infer([self.nodes[i].type for i in n.inputs])
            except GraphError as e:
                raise GraphError(f"{n.name} ({type(n.op).__name__}): {e}") from None
            if again != n.type:
                raise GraphError(
                    f"{n.name} ({type(n.op).__name__}): stored type {n.type} != inferred {again}"
                )
        if not self.outputs:
            raise GraphError(f"graph {self.name!r} has no outputs: call graph.output(node)")
        for o in self.outputs:
            if not 0 <= o < len(self.nodes):
                raise GraphError(f"output id {o} is not a node")
        return self

    # -- helpers ----------------------------------------------------------------------------
    def _id(self, x: NodeRef, name: str, op: ops.Op | None) -> int:
        node_id = x.id if isinstance(x, Node) else x
        if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id < len(self.nodes):
            what = f" ({type(op).__name__})" if op is not None else ""
            raise GraphError(f"{name}{what}: {x!r} is not a node of graph {self.name!r}")
        if isinstance(x, Node) and self.nodes[node_id] is not x:
            raise GraphError(f"{name}: node {x.name!r} belongs to another graph")
        return node_id

    def _fresh_name(self, op: ops.Op, name: str | None) -> str:
        if name is not None:
            if name in self._by_name:
                raise GraphError(f"{name} ({type(op).__name__}): a node with this name already exists")
            return name
        base = re.sub(r"(?<!^)(?=[A-Z])", "_", type(op).__name__).lower()
        while True:
            count = self._counters.get(base, 0)
            self._counters[base] = count + 1
            candidate = f"{base}_{count}"
            if candidate not in self._by_name:
                return candidate


def describe(node: Node) -> str:
    return f"{node.name} ({type(node.op).__name__}) {format_shape(node.shape)}"

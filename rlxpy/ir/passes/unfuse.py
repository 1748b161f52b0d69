"""The unfuse pass: rebuild a graph, node by node, into primitives only.

* Every composite op (``op.composite``) is replaced by its expansion, registered per op with
  ``@expands(Op)`` in unfuse_control.py (If, While) and unfuse_layers.py (the rest); the package
  (passes/__init__.py) imports both, so the registry is full whenever this module is loaded.
* Binary / Compare / Where get explicit broadcasting: an operand whose shape differs from the
  output is left-padded with 1s by a Reshape (skipped when the ranks already match) and then
  Expanded to the output's shape, so kernels only ever see equal shapes.
* Everything else is copied as is (FusedMatMulBiasAct and FusedResidualLN/RmsNorm have kernels).

Names: a node that maps 1:1 keeps its name; a composite's expansion names its nodes
``<composite>/<part>`` (``blk0.attn/qkv``) and its last node takes the composite's own name, so
graph outputs keep their names and order; an inlined branch's nodes are named
``<composite>/then/<node>``, ``<composite>/iter3/body/<node>``. Input and Param nodes keep theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rlxpy.errors import GraphError, RegistryError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType, to_storage
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.shape import Shape

ExpandFn = Callable[["Unfuser", Node, list[Node], str], Node]
EXPANDERS: dict[type[ops.Op], ExpandFn] = {}

#: Ops whose operands the pass broadcasts explicitly, with a name per operand position.
BROADCASTING: dict[type[ops.Op], tuple[str, ...]] = {
    ops.Binary: ("lhs", "rhs"),
    ops.Compare: ("lhs", "rhs"),
    ops.Where: ("cond", "on_true", "on_false"),
}


def expands(op_type: type[ops.Op]) -> Callable[[ExpandFn], ExpandFn]:
    """Register ``fn(unfuser, node, args, name) -> Node``: the expansion of ``op_type``. ``args`` are
    the node's inputs in the new graph; the returned node should be named ``name``."""

    def register(fn: ExpandFn) -> ExpandFn:
        if op_type in EXPANDERS:
            raise RegistryError(f"{op_type.__name__} already expanded in {EXPANDERS[op_type].__module__}")
        EXPANDERS[op_type] = fn
        return fn

    return register


class Unfuser:
    """Builds the new graph. Expanders call :meth:`emit` (which broadcasts Binary/Compare/Where
    operands) and :meth:`inline` (which unfuses a sub-graph into the new graph)."""

    def __init__(self, source: Graph) -> None:
        self.graph = Graph(source.name)
        # the source's names are kept for the nodes that map 1:1, so generated names avoid them
        self._reserved = {n.name for n in source.nodes}
        self._used: set[str] = set()

    # -- names ------------------------------------------------------------------------------
    def fresh(self, name: str) -> str:
        """``name``, or ``name_1``, ``name_2``... if a source node or an emitted node has it."""
        candidate, count = name, 0
        while candidate in self._reserved or candidate in self._used:
            count += 1
            candidate = f"{name}_{count}"
        self._used.add(candidate)
        return candidate

    # -- building ---------------------------------------------------------------------------
    def emit(self, op: ops.Op, inputs: Sequence[Node], name: str, exact: bool = False) -> Node:
        """Append ``op``; ``exact`` keeps ``name`` as given, else it is made unique by :meth:`fresh`."""
        if exact:
            self._used.add(name)
        else:
            name = self.fresh(name)
        roles = BROADCASTING.get(type(op))
        if roles is not None:
            inputs = self._broadcast_operands(op, list(inputs), roles, name)
        return self.graph.apply(op, inputs, name)

    def constant(self, value: np.ndarray | float, dtype: DType, name: str) -> Node:
        array = np.asarray(value, dtype=np.float32 if dtype is DType.BF16 else dtype.numpy)
        data = to_storage(array, dtype).tobytes()
        return self.emit(ops.Constant(data, tuple(array.shape), dtype), [], name)

    def reshape(self, x: Node, shape: Shape, name: str, exact: bool = False) -> Node:
        """A Reshape view, or ``x`` itself when it already has ``shape`` (and no name is forced)."""
        if tuple(x.shape) == tuple(shape) and not exact:
            return x
        return self.emit(ops.Reshape(tuple(shape)), [x], name, exact)

    def transpose(self, x: Node, perm: Sequence[int], name: str) -> Node:
        if list(perm) == list(range(x.rank)):
            return x
        return self.emit(ops.Transpose(tuple(perm)), [x], name)

    def broadcast(self, x: Node, shape: Shape, name: str) -> Node:
        """``x`` as ``shape``: Reshape left-padded with 1s (only when the rank grows), then Expand."""
        shape = tuple(shape)
        if tuple(x.shape) == shape:
            return x
        if x.rank < len(shape):
            x = self.emit(ops.Reshape((1,) * (len(shape) - x.rank) + tuple(x.shape)), [x], f"{name}_reshape")
        return self.emit(ops.Expand(shape), [x], f"{name}_expand")

    def _broadcast_operands(self, op: ops.Op, inputs: list[Node], roles: tuple[str, ...],
                            name: str) -> list[Node]:
        try:
            shape = op.infer([x.type for x in inputs]).shape
        except GraphError:
            return inputs  # graph.apply reports it, with the node's name
        return [self.broadcast(x, shape, f"{name}/{role}") for x, role in zip(inputs, roles)]

    # -- graphs -----------------------------------------------------------------------------
    def inline(self, graph: Graph, bound: Sequence[Node] | None = None,
               prefix: str | None = None) -> list[Node]:
        """Unfuse ``graph``'s nodes into the new graph; return its outputs there.

        Top level (``bound`` None): Inputs, Params and every 1:1 node keep their names. Sub-graph:
        its Inputs are ``bound`` positionally (node order), other nodes are named ``prefix/name``."""
        mapping: dict[int, Node] = {}
        values = iter(bound) if bound is not None else None
        for node in graph.nodes:
            if values is not None and isinstance(node.op, ops.Input):
                mapping[node.id] = next(values)
                continue
            if values is not None and isinstance(node.op, ops.Param):
                raise GraphError(f"{prefix}: sub-graph Param {node.name!r}: pass it as a capture instead")
            name = node.name if prefix is None else self.fresh(f"{prefix}/{node.name}")
            args = [mapping[i] for i in node.inputs]
            expander = EXPANDERS.get(type(node.op))
            if expander is not None:
                result = expander(self, node, args, name)
                if result.name != name:  # e.g. a loop of 0 iterations returns its input: alias it
                    result = self.reshape(result, node.shape, name, exact=True)
            elif node.op.composite:
                raise GraphError(f"{where(node)}: composite op with no unfuse expansion registered")
            else:
                result = self.emit(node.op, args, name, exact=True)
            mapping[node.id] = result
        return [mapping[o] for o in graph.outputs]


def unfuse(graph: Graph) -> Graph:
    """A NEW graph equal to ``graph`` in value (run_reference) made of primitives only: no
    composite op, and every Binary/Compare/Where has operands of its output's shape. Outputs keep
    their names and order; Input and Param nodes keep their names. ``graph`` is not modified."""
    unfuser = Unfuser(graph)
    outputs = unfuser.inline(graph)
    unfuser.graph.output(*outputs)
    check_unfused(unfuser.graph)
    return unfuser.graph


def check_unfused(graph: Graph) -> Graph:
    """Raise GraphError unless ``graph`` is primitive: no composite op, no implicit broadcasting."""
    for node in graph.nodes:
        if node.op.composite:
            raise GraphError(f"{where(node)}: composite op left after unfuse")
        if type(node.op) in BROADCASTING:
            shapes = [graph.nodes[i].shape for i in node.inputs]
            if any(tuple(s) != tuple(node.shape) for s in shapes):
                raise GraphError(f"{where(node)}: operand shapes {shapes} differ from the output "
                                 f"{node.shape}: broadcasting is implicit")
    return graph

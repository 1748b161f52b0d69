"""Reverse-mode autodiff over the IR: ``grad(graph, loss, wrt)`` returns a new graph that holds the
forward and the nodes computing the gradient of ``loss`` with respect to each ``wrt`` tensor.

The graph is first unfused (composites and control flow become primitives, so only primitives need
rules), and fused matmuls whose activation's gradient needs its input are split into the matmul and
the activation (the input is then kept instead of recomputed). The traversal walks the nodes from the
loss back in reverse order. A node is *active* when it is a float tensor that depends on a ``wrt``
tensor and that the loss depends on; each active node's rule (``rlxpy/ir/grad/<family>.py``,
registered with ``@vjp``) turns the gradient of its output into gradients of its active inputs.
Gradients that reach one tensor by several paths (fan-out, tied weights) are summed (the slices that
Narrows hand back are merged into one Concat first, or are the whole tensor they tile); inactive inputs
(integer indices, masks, constants) get none. An active node whose op has no rule is an
UnsupportedOpError naming the node and op.

The loss's gradient is seeded with ones (a non-scalar loss is its sum). The result's outputs are the
source graph's outputs, the loss (when it was not one), then ``grad/<name>`` for each ``wrt`` in
order: a tensor the loss does not depend on gets zeros.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from rlxpy.errors import GraphError, where
from rlxpy.ir import ops
from rlxpy.ir.grad import Grad, GradContext, Slice, differentiable, vjp_of
from rlxpy.ir.graph import Graph, Node, NodeRef
from rlxpy.ir.ops.backward import FROM_OUTPUT
from rlxpy.ir.passes.rewrite import Emit, Remap, copy_graph
from rlxpy.ir.passes.unfuse import unfuse

GRAD_PREFIX = "grad/"


@dataclass(frozen=True)
class Gradients:
    """The differentiated graph: ``loss`` and ``grads`` ({wrt name: its gradient's node name}) name
    nodes of ``graph``, all of them outputs; ``unreached`` lists the wrt tensors the loss does not
    depend on (their gradients are zeros)."""

    graph: Graph
    loss: str
    grads: Mapping[str, str]
    unreached: tuple[str, ...] = ()


def grad_name(name: str) -> str:
    """The name of the gradient of tensor ``name`` in a differentiated graph."""
    return GRAD_PREFIX + name


def grad(graph: Graph, loss: NodeRef | str, wrt: Iterable[NodeRef | str] | None = None) -> Gradients:
    """Differentiate ``loss`` with respect to ``wrt`` (names or nodes of ``graph``; default every
    float Param). ``graph`` is not modified."""
    loss_name = _name_of(graph, loss, "loss")
    names = [n.name for n in graph.params() if differentiable(n)] if wrt is None else \
        list(dict.fromkeys(_name_of(graph, w, "wrt") for w in wrt))
    out = copy_graph(split_activations(unfuse(graph)))
    loss_node = out[loss_name]
    if not differentiable(loss_node):
        raise GraphError(f"{where(loss_node)}: the loss must be a float tensor, got {loss_node.type}")
    targets = [out[name] for name in names]
    for node in targets:
        if not differentiable(node):
            raise GraphError(f"{where(node)}: cannot differentiate with respect to a {node.dtype} tensor")
    active = _active(out, loss_node, {n.id for n in targets})
    forward_nodes = len(out.nodes)
    found = _backward(out, loss_node, active, {n.id for n in targets})
    grads, unreached = {}, []
    for node in targets:
        name = grad_name(node.name)
        value = found.get(node.id)
        if value is None:
            unreached.append(node.name)
            value = GradContext(out, active).zeros(node)
        out.reshape(value, node.shape, name)  # a view: the gradient under its public name
        grads[node.name] = name
    if loss_node.id not in out.outputs:
        out.output(loss_node)
    out.output(*(out[name] for name in grads.values()))
    return Gradients(_drop_unread(out, forward_nodes), loss_name, grads, tuple(unreached))


def _drop_unread(graph: Graph, first: int) -> Graph:
    """``graph`` without the gradient nodes (ids from ``first``) that nothing reads, e.g. the Narrows
    of a rule's output that the traversal replaced by the output itself (AttentionBackward PACKED)."""
    users, outputs = graph.consumers(), set(graph.outputs)
    unread: set[int] = set()
    for node in reversed(graph.nodes[first:]):
        if node.id not in outputs and all(user in unread for user in users[node.id]):
            unread.add(node.id)
    return copy_graph(graph, drop=unread) if unread else graph


def _name_of(graph: Graph, ref: NodeRef | str, what: str) -> str:
    if isinstance(ref, str):
        try:
            return graph[ref].name
        except KeyError:
            raise GraphError(f"{what} {ref!r} is not a node of graph {graph.name!r}") from None
    return graph[ref].name


def _active(graph: Graph, loss: Node, wrt: set[int]) -> list[bool]:
    """Float nodes that depend on a ``wrt`` tensor and that the loss depends on."""
    depends = [False] * len(graph.nodes)
    for node in graph.nodes[:loss.id + 1]:
        depends[node.id] = differentiable(node) and (node.id in wrt or any(depends[i] for i in node.inputs))
    reaches = [False] * len(graph.nodes)
    reaches[loss.id] = True
    for node in reversed(graph.nodes[:loss.id + 1]):
        if reaches[node.id]:
            for i in node.inputs:
                reaches[i] = True
    return [d and r for d, r in zip(depends, reaches)]


def _backward(graph: Graph, loss: Node, active: list[bool], wrt: set[int]) -> dict[int, Node]:
    """Walk from the loss back; returns {wrt node id: its summed gradient}."""
    ctx = GradContext(graph, active)
    pending: dict[int, list[Grad]] = {}
    if active[loss.id]:
        seed = graph.constant(np.ones(loss.shape), dtype=loss.dtype, name=ctx.name(loss, "seed"))
        pending[loss.id] = [seed]
    found: dict[int, Node] = {}
    for node in reversed(graph.nodes[:loss.id + 1]):
        parts = pending.pop(node.id, None)
        if not parts or not active[node.id]:
            continue
        dy = ctx.combine(parts, node)
        if node.id in wrt:
            found[node.id] = dy
        if not node.inputs:
            continue
        results = list(vjp_of(node)(ctx, node, dy))
        if len(results) != len(node.inputs):
            raise GraphError(f"{where(node)}: its gradient rule returned {len(results)} gradients for "
                             f"{len(node.inputs)} inputs")
        for index, value in zip(node.inputs, results):
            if value is None or not active[index]:
                continue
            _check_type(node, graph.nodes[index], value)
            pending.setdefault(index, []).append(value)
    return found


def _check_type(node: Node, source: Node, value: Grad) -> None:
    """A gradient has its input's type (a Slice: except along its axis)."""
    tensor = value.value if isinstance(value, Slice) else value
    shape = list(source.shape)
    if isinstance(value, Slice):
        shape[value.axis] = tensor.shape[value.axis]
    if tensor.dtype != source.dtype or list(tensor.shape) != shape:
        raise GraphError(f"{where(node)}: its gradient rule gave {tensor.type} for input {source.name} "
                         f"({source.type})")


def split_activations(graph: Graph) -> Graph:
    """``graph`` with each FusedMatMulBiasAct whose activation's gradient needs its input split into
    the matmul (``<name>:linear``) and the activation (``<name>``), so the backward reads the stored
    pre-activation instead of recomputing the matmul."""
    emits: dict[int, Emit] = {}
    for node in graph.nodes:
        op = node.op
        if isinstance(op, ops.FusedMatMulBiasAct) and op.activation not in (None, *FROM_OUTPUT):
            emits[node.id] = _split(node)
    return copy_graph(graph, emits) if emits else graph


def _split(node: Node) -> Emit:
    def emit(out: Graph, remap: Remap) -> dict[int, Node]:
        args = [remap[i] for i in node.inputs]
        linear = out.apply(ops.FusedMatMulBiasAct(None), args, f"{node.name}:linear")
        return {node.id: out.activation(linear, node.op.activation, node.name)}

    return emit

"""Clean-up of imported graphs (torch.fx and ONNX frontends): drop dead nodes, fuse activations.

Importers translate op by op, so they leave nodes nobody reads (a transpose cancelled by the next
one, a statistic no one uses) and activations that could ride in a matmul's epilogue. ``finalize``
rebuilds the graph with only what the outputs need (and every Input), merges identical pure nodes
(common-subexpression elimination: models often rebuild one mask per layer), and turns
``act(reshape*(x @ w + b))`` into one
FusedMatMulBiasAct with that activation when the linear feeds nothing else (the epilogue applies
the same element-wise function, so results are unchanged). Names and output order are kept. The
plan is made on the old graph (which node stands for which); the copy is the pattern engine's
``copy_graph`` (ir/passes/rewrite.py).
"""

from __future__ import annotations

from rlxpy.ir import Graph, ops
from rlxpy.ir.passes.rewrite import alias, copy_graph, with_op


def finalize(graph: Graph) -> Graph:
    """A copy of ``graph`` with dead nodes removed and activations folded into linears."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    fused: dict[int, ops.ActKind] = {}  # linear id -> activation
    for node in graph.nodes:
        if not isinstance(node.op, ops.Activation) or node.id in outputs:  # outputs keep their names
            continue
        source = graph[node.inputs[0]]
        while isinstance(source.op, ops.Reshape) and _private(source.id, consumers, outputs):
            source = graph[source.inputs[0]]
        if isinstance(source.op, ops.FusedMatMulBiasAct) and source.op.activation is None \
                and _private(source.id, consumers, outputs) and source.id not in fused:
            fused[source.id] = node.op.fn
    live = _live(graph)
    same = _same_values(graph, live, set(_activation_nodes(graph, fused, consumers)), fused)
    replace = {i: alias(i, source) for i, source in same.items()}
    replace.update({i: with_op(graph[i], ops.FusedMatMulBiasAct(fn)) for i, fn in fused.items()
                    if i in live and i not in same})
    return copy_graph(graph, replace, drop=[n.id for n in graph.nodes if n.id not in live])


def _same_values(graph: Graph, live: set[int], activated: set[int], fused: dict[int, ops.ActKind]
                 ) -> dict[int, int]:
    """{live node: the earlier node whose value it is}: an activation its linear now applies, and a
    node computing what an earlier one computes (graph outputs keep their own node)."""
    outputs = set(graph.outputs)
    same: dict[int, int] = {}
    seen: dict[tuple, int] = {}
    for node in graph.nodes:
        if node.id not in live:
            continue
        if node.id in activated:  # its input already carries the activation
            same[node.id] = same.get(node.inputs[0], node.inputs[0])
            continue
        op = ops.FusedMatMulBiasAct(fused[node.id]) if node.id in fused else node.op
        key = _cse_key(op, tuple(same.get(i, i) for i in node.inputs))
        if key is not None and key in seen and node.id not in outputs:
            same[node.id] = seen[key]
        elif key is not None:
            seen.setdefault(key, node.id)
    return same


def _cse_key(op: ops.Op, inputs: tuple[int, ...]) -> tuple | None:
    """Identical pure ops on identical inputs compute one value (layers that rebuild one mask)."""
    if isinstance(op, (ops.Input, ops.Param, ops.CacheWrite, ops.Sample)):
        return None
    if isinstance(op, ops.Constant):
        return ("const", op.dtype, op.shape, op.data)
    key = (op, inputs)
    try:
        hash(key)
    except TypeError:  # an op holding a sub-graph or an array
        return None
    return key


def _private(node_id: int, consumers: dict[int, list[int]], outputs: set[int]) -> bool:
    """Read by exactly one node and not a graph output."""
    return len(consumers[node_id]) == 1 and node_id not in outputs


def _activation_nodes(graph: Graph, fused: dict[int, ops.ActKind], consumers: dict[int, list[int]]
                      ) -> list[int]:
    """The Activation node each fused linear absorbed (found by walking down its reshape chain)."""
    found = []
    for linear in fused:
        node = graph[consumers[linear][0]]
        while isinstance(node.op, ops.Reshape):
            node = graph[consumers[node.id][0]]
        found.append(node.id)
    return found


def _live(graph: Graph) -> set[int]:
    """What the outputs read, plus every Input (callers pass them all; they cost nothing)."""
    live: set[int] = set()
    stack = list(graph.outputs) + [n.id for n in graph.inputs()]
    while stack:
        node_id = stack.pop()
        if node_id not in live:
            live.add(node_id)
            stack.extend(graph.nodes[node_id].inputs)
    return live

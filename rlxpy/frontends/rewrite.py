"""Clean-up of imported graphs (torch.fx and ONNX frontends): drop dead nodes, fuse activations.

Importers translate op by op, so they leave nodes nobody reads (a transpose cancelled by the next
one, a statistic no one uses) and activations that could ride in a matmul's epilogue. ``finalize``
rebuilds the graph with only what the outputs need (and every Input), merges identical pure nodes
(common-subexpression elimination: models often rebuild one mask per layer), and turns
``act(reshape*(x @ w + b))`` into one
FusedMatMulBiasAct with that activation when the linear feeds nothing else (the epilogue applies
the same element-wise function, so results are unchanged). Names and output order are kept.
"""

from __future__ import annotations

from rlxpy.ir import Graph, ops


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
    activated = {graph[n].id for n in _activation_nodes(graph, fused, consumers)}
    live = _live(graph)
    out = Graph(graph.name)
    mapping: dict[int, int] = {}
    seen: dict[tuple, int] = {}
    for node in graph.nodes:
        if node.id not in live:
            continue
        if node.id in activated:  # its input already carries the activation
            mapping[node.id] = mapping[node.inputs[0]]
            continue
        op = ops.FusedMatMulBiasAct(fused[node.id]) if node.id in fused else node.op
        inputs = tuple(mapping[i] for i in node.inputs)
        key = _cse_key(op, inputs)
        if key is not None and key in seen and node.id not in outputs:
            mapping[node.id] = seen[key]
            continue
        mapping[node.id] = out.apply(op, inputs, node.name).id
        if key is not None:
            seen.setdefault(key, mapping[node.id])
    out.output(*[mapping[o] for o in graph.outputs])
    return out


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

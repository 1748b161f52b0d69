"""The f16 weight shadow: f32 matmul weights kept as f16 in the arena.

A weight that a matmul cannot bind in one window as f32 (with the other tensors of that node, even
staged: ``windows.shadow_needed``) is stored as f16 instead; ``RLX_WGPU_F16_WEIGHTS=1`` does so for
every eligible weight (half the bytes to read); ``RLX_WGPU_MATMUL_F32_ONLY=1`` never does.

The f16 copy *replaces* the f32 param in the arena rather than living in a second buffer: the
graph's Param node becomes f16 (MatMul's type rule takes its dtype from the activation, so no other
node changes), every step keeps the one-binding convention and the window math stays as it is, and a
3 GiB set of f32 weights takes 1.5 GiB. ``WgpuExecutable.set_param`` rounds f32 values to f16 on
upload. Only params that nothing but matmuls read as their 2-D weight are eligible: any other reader
(or a graph output) needs the f32 bytes, which are then no longer there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rlxpy.errors import GraphError, LimitError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.passes.rewrite import copy_graph, with_op
from rlxpy.ir.shape import format_shape
from rlxpy.wgpu_backend import windows
from rlxpy.wgpu_backend.arena import tensor_bytes

MATMULS = (ops.MatMul, ops.FusedMatMulBiasAct)
MODES = ("auto", "force", "off")
MIB = float(1 << 20)


def eligible(graph: Graph) -> dict[int, list[Node]]:
    """{param id: the matmuls reading it} for f32 2-D params read only as a matmul's weight."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    found = {}
    for param in graph.params():
        if param.dtype is not DType.F32 or param.rank != 2 or param.id in outputs:
            continue
        users = [graph.nodes[i] for i in consumers[param.id]]
        if users and all(_weight_only(user, param, graph) for user in users):
            found[param.id] = users
    return found


def _weight_only(user: Node, param: Node, graph: Graph) -> bool:
    if not isinstance(user.op, MATMULS) or [i for i, x in enumerate(user.inputs) if x == param.id] != [1]:
        return False
    return all(graph.nodes[i].dtype is DType.F32 for i in user.inputs if i != param.id)


def _others(user: Node, param: Node, graph: Graph) -> list[int]:
    """Bytes of the matmul's other tensors (inputs and output), each counted once."""
    return [tensor_bytes(graph.nodes[i]) for i in sorted({*user.inputs, user.id} - {param.id})]


def choose(graph: Graph, cap: int, alignment: int, mode: str = "auto") -> list[int]:
    """Ids of the params to shadow. LimitError when a weight fits one binding neither as f32 nor as f16
    (or needs the shadow that ``mode="off"`` forbids)."""
    if mode not in MODES:
        raise ValueError(f"shadow mode {mode!r}: expected one of {MODES}")
    chosen = []
    for param_id, users in eligible(graph).items():
        param = graph.nodes[param_id]
        f32 = tensor_bytes(param)
        others = [_others(user, param, graph) for user in users]
        needed = [u for u, o in zip(users, others) if windows.shadow_needed(f32, o, cap, alignment)]
        if mode == "off":
            if needed:
                raise LimitError(f"{where(needed[0])}: weight {_describe(param)} does not fit one "
                                 f"{cap / MIB:.3f} MiB binding as f32, and RLX_WGPU_MATMUL_F32_ONLY forbids "
                                 "its f16 shadow")
            continue
        if not needed and mode == "auto":
            continue
        for user, sizes in zip(users, others):
            if not windows.shadow_fits(f32, sizes, cap, alignment):
                need = windows.binding_need([windows.f16_bytes(f32), *sizes], alignment)
                raise LimitError(f"{where(user)}: weight {_describe(param)} does not fit one "
                                 f"{cap / MIB:.3f} MiB binding even as its f16 shadow: with the node's "
                                 f"other tensors it needs {need / MIB:.3f} MiB (max_storage_buffer_binding_"
                                 "size or RLX_WGPU_MAX_BINDING). Split the weight.")
        chosen.append(param_id)
    return chosen


def named(graph: Graph, names: Iterable[str]) -> list[int]:
    """Ids of the params called ``names`` (an explicit choice, e.g. a debug twin copying its parent's);
    GraphError for a name that is not an eligible weight."""
    by_name = {graph.nodes[i].op.name: i for i in eligible(graph)}
    wrong = sorted(set(names) - set(by_name))
    if wrong:
        raise GraphError(f"f16 weights {wrong}: not f32 2-D params read only as a matmul's weight "
                         f"(eligible: {sorted(by_name)[:10]})")
    return sorted(by_name[name] for name in set(names))


def _describe(param: Node) -> str:
    return f"{param.name} ({format_shape(param.shape)} f32, {tensor_bytes(param) / MIB:.3f} MiB)"


def apply(graph: Graph, param_ids: list[int]) -> tuple[Graph, dict[str, Node]]:
    """The graph with those params made f16, and {param name: its f32 node} (for set_param)."""
    if not param_ids:
        return graph, {}
    params = [graph.nodes[i] for i in sorted(set(param_ids))]
    out = copy_graph(graph, {p.id: with_op(p, dataclasses.replace(p.op, dtype=DType.F16)) for p in params})
    return out.verify(), {graph.nodes[i].op.name: graph.nodes[i] for i in param_ids}

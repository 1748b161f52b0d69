"""Pattern fusion for the decode path: fold RMSNorm, SwiGLU and residual adds into GGUF GEMVs.

Decoding one token is bound by the number of dispatches (each costs ~8 µs of GPU time on an
H100 through wgpu, benches/RESULTS.md), not by arithmetic, so the three cheapest neighbours of
every quantised GEMV are folded into it (FusedGgufMatMul):

* ``RmsNorm(x, gamma)`` (no beta) whose every consumer is a GGUF GEMV reading it as x: each GEMV
  renormalises x itself (x is one hidden vector: recomputing its norm is free next to the GEMV);
* ``silu(x @ Wg^T) * (x @ Wu^T)`` with the same x and weight geometry: one dual-weight GEMV;
* ``a + GEMV(...)`` where the GEMV has no other consumer: a residual epilogue;
* ``RopeKvAppend(GEMV(...), caches, cos, sin, pos)`` (a fused QKV projection) where the GEMV has
  no other consumer: the GEMV rotates q and k and appends k, v to the KV caches itself.

Only rows <= ``max_rows`` (the GEMV path) are fused; results equal the unfused graph's up to f32
rounding order. Each pattern can be switched off, and the tests check that results agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.base import ActKind, BinaryOp

GEMV = (ops.DequantMatMulGguf,)


@dataclass
class _Plan:
    fused: dict[int, dict] = field(default_factory=dict)  # root node id -> fused op description
    dropped: set[int] = field(default_factory=set)


def _rows(graph: Graph, node: Node) -> int:
    x = graph.nodes[node.inputs[0]]
    return math.prod(x.shape[:-1]) if x.rank > 1 else 1


def _is_gemv(graph: Graph, node: Node, max_rows: int) -> bool:
    return isinstance(node.op, GEMV) and _rows(graph, node) <= max_rows


# over the complexity bar (25 > 20) until the one pattern engine replaces this planner
def plan_fusion(graph: Graph, max_rows: int = 8, norm: bool = True, swiglu: bool = True,  # noqa: C901
                residual: bool = True, rope: bool = True) -> _Plan:
    users = graph.consumers()
    outputs = set(graph.outputs)
    plan = _Plan()
    single = {i for i, u in users.items() if len(u) == 1 and i not in outputs}

    def base(node: Node) -> dict:
        return {"qtype": node.op.qtype, "n": node.op.n, "k": node.op.k, "x": node.inputs[0],
                "w": node.inputs[1], "w_up": None, "gamma": None, "eps": 0.0, "residual": None,
                "rope": None}

    # 1. SwiGLU: mul(silu(gemv_g(x)), gemv_u(x))
    if swiglu:
        for node in graph.nodes:
            if not (isinstance(node.op, ops.Binary) and node.op.op is BinaryOp.MUL):
                continue
            a, b = (graph.nodes[i] for i in node.inputs)
            for act, up in ((a, b), (b, a)):
                if not (isinstance(act.op, ops.Activation) and act.op.fn is ActKind.SILU):
                    continue
                gate = graph.nodes[act.inputs[0]]
                if not (_is_gemv(graph, gate, max_rows) and _is_gemv(graph, up, max_rows)):
                    continue
                same = (gate.inputs[0] == up.inputs[0] and gate.op.qtype == up.op.qtype
                        and gate.op.n == up.op.n and gate.op.k == up.op.k)
                if same and {gate.id, act.id, up.id} <= single and up.id != gate.id:
                    desc = base(gate)
                    desc["w_up"] = up.inputs[1]
                    plan.fused[node.id] = desc
                    plan.dropped |= {gate.id, act.id, up.id}
                    break
    # 2. plain GEMVs become fused candidates too (for the norm and residual folds)
    for node in graph.nodes:
        if _is_gemv(graph, node, max_rows) and node.id not in plan.dropped:
            plan.fused[node.id] = base(node)
    # 3. residual: add(a, gemv) with the gemv used only there
    if residual:
        for node in graph.nodes:
            if not (isinstance(node.op, ops.Binary) and node.op.op is BinaryOp.ADD):
                continue
            left, right = node.inputs
            for other, mm in ((left, right), (right, left)):
                if mm in plan.fused and mm in single and graph.nodes[other].shape == node.shape \
                        and graph.nodes[mm].shape == node.shape and other != mm:
                    desc = dict(plan.fused.pop(mm))
                    desc["residual"] = other
                    plan.fused[node.id] = desc
                    plan.dropped.add(mm)
                    break
    # 4. RoPE + KV append after a plain GEMV used only there
    if rope:
        for node in graph.nodes:
            if not isinstance(node.op, ops.RopeKvAppend):
                continue
            mm = node.inputs[0]
            desc = plan.fused.get(mm)
            if desc is not None and mm in single and desc["w_up"] is None and desc["residual"] is None:
                desc = dict(plan.fused.pop(mm))
                desc["rope"] = (node.op, list(node.inputs[1:]))
                plan.fused[node.id] = desc
                plan.dropped.add(mm)
    # 5. RMSNorm without beta whose every consumer is a fused GEMV reading it as x
    if norm:
        for node in graph.nodes:
            if not (isinstance(node.op, ops.RmsNorm) and len(node.inputs) == 2) or node.id in outputs:
                continue
            readers = [d for d in plan.fused.values() if d["x"] == node.id]
            consumers = set(users[node.id])
            roots = {r for r, d in plan.fused.items() if d["x"] == node.id}
            covered = {r for r in roots} | {i for i in consumers if i in plan.dropped}
            if readers and consumers <= covered and all(
                    d["x"] != node.id or (d["w"] not in (node.id,)) for d in readers):
                for d in readers:
                    d["x"], d["gamma"], d["eps"] = node.inputs[0], node.inputs[1], node.op.eps
                plan.dropped.add(node.id)
    return plan


def fuse_gguf_decode(graph: Graph, max_rows: int = 8, **switches: bool) -> Graph:
    """A new graph with the patterns above fused; names of kept nodes and outputs are unchanged."""
    plan = plan_fusion(graph, max_rows, **switches)
    plain = {r for r, d in plan.fused.items()
             if d["w_up"] is None and d["gamma"] is None and d["residual"] is None and d["rope"] is None}
    out = Graph(graph.name)
    remap: dict[int, Node] = {}
    for node in graph.nodes:
        if node.id in plan.dropped:
            continue
        if node.id in plan.fused and node.id not in plain:
            d = plan.fused[node.id]
            rope, rope_inputs = d["rope"] or (None, [])
            rope_fields = {} if rope is None else {
                "head_dim": rope.head_dim, "q_width": rope.q_width, "kv_width": rope.kv_width,
                "n_rot": rope.n_rot, "interleaved": rope.interleaved}
            op = ops.FusedGgufMatMul(d["qtype"], d["n"], d["k"], d["eps"], d["w_up"] is not None,
                                     d["residual"] is not None, **rope_fields)
            ins = [d["x"], d["w"]] + [d[r] for r in ("w_up", "gamma", "residual") if d[r] is not None]
            ins += rope_inputs
            remap[node.id] = out.apply(op, [remap[i] for i in ins], node.name)
        else:
            remap[node.id] = out.apply(node.op, [remap[i] for i in node.inputs], node.name)
    out.output(*(remap[i] for i in graph.outputs))
    return out

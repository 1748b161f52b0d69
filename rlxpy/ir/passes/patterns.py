"""The decode GEMV fusions (a pattern set of the engine in rewrite.py, registered as ``decode``):
fold RMSNorm, SwiGLU, residual adds and RoPE + KV append into GGUF GEMVs.

Decoding one token is bound by the number of dispatches (each costs ~8 µs of GPU time on an
H100 through wgpu, benches/RESULTS.md), not by arithmetic, so the cheapest neighbours of every
quantised GEMV are folded into it (FusedGgufMatMul):

* ``RmsNorm(x, gamma)`` (no beta) whose every consumer is a GGUF GEMV reading it as x: each GEMV
  renormalises x itself (x is one hidden vector: recomputing its norm is free next to the GEMV);
* ``silu(x @ Wg^T) * (x @ Wu^T)`` with the same x and weight geometry: one dual-weight GEMV;
* ``a + GEMV(...)`` where the GEMV has no other consumer: a residual epilogue;
* ``RopeKvAppend(GEMV(...), caches, cos, sin, pos)`` (a fused QKV projection) where the GEMV has
  no other consumer: the GEMV rotates q and k and appends k, v to the KV caches itself.

The folds build on each other (a SwiGLU GEMV takes a residual, a norm folds into every GEMV that
reads it), so they are one pattern: :func:`match_decode` plans them in the order SwiGLU, residual,
RoPE, norm into one :class:`GemvFusion` per fused GEMV (the typed match data), and
:func:`emit_decode` builds it where its root (the node it stands for) was. Only rows <=
``max_rows`` (the GEMV path) are fused; results equal the unfused graph's up to f32 rounding order.
Each fold can be switched off (:func:`fuse_gguf_decode`), and the tests check that results agree.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.base import ActKind, BinaryOp
from rlxpy.ir.passes.rewrite import Pattern, Remap, register, rewrite

GEMV = (ops.DequantMatMulGguf,)


@dataclass(frozen=True)
class GemvFusion:
    """One FusedGgufMatMul: ``root`` is the old node it stands for (and whose name it takes),
    ``gemv`` the GGUF GEMV it runs; the other fields are old node ids of its operands, and
    ``absorbed`` the old nodes folded into it (they vanish)."""

    root: Node
    gemv: ops.DequantMatMulGguf
    x: int
    w: int
    w_up: int | None = None
    gamma: int | None = None
    eps: float = 0.0
    residual: int | None = None
    rope: ops.RopeKvAppend | None = None
    rope_inputs: tuple[int, ...] = ()
    absorbed: frozenset[int] = frozenset()

    @property
    def plain(self) -> bool:
        """Nothing folded in: the GEMV stays as it is."""
        return self.w_up is None and self.gamma is None and self.residual is None and self.rope is None

    @property
    def sites(self) -> tuple[int, ...]:
        return (self.root.id,)

    @property
    def replaced(self) -> frozenset[int]:
        return self.absorbed


@dataclass
class _Plan:
    graph: Graph
    max_rows: int
    users: dict[int, list[int]]
    outputs: set[int]
    single: set[int]  # nodes read by exactly one node and not outputs
    fused: dict[int, GemvFusion] = field(default_factory=dict)  # root id -> its fusion
    dropped: set[int] = field(default_factory=set)

    def is_gemv(self, node: Node) -> bool:
        """A GGUF GEMV on the decode path (at most ``max_rows`` rows of x)."""
        if not isinstance(node.op, GEMV):
            return False
        x = self.graph.nodes[node.inputs[0]]
        return (math.prod(x.shape[:-1]) if x.rank > 1 else 1) <= self.max_rows

    def refold(self, old_root: int, root: Node, **changes) -> None:
        """Move the fusion at ``old_root`` to ``root`` (which absorbs the old root), with ``changes``."""
        fusion = self.fused.pop(old_root)
        self.fused[root.id] = dataclasses.replace(fusion, root=root, absorbed=fusion.absorbed | {old_root},
                                                  **changes)
        self.dropped.add(old_root)


def _plain(node: Node) -> GemvFusion:
    return GemvFusion(node, node.op, node.inputs[0], node.inputs[1])  # type: ignore[arg-type]


def _is_binary(node: Node, op: BinaryOp) -> bool:
    return isinstance(node.op, ops.Binary) and node.op.op is op


def _swiglu_pair(plan: _Plan, node: Node) -> tuple[Node, Node, Node] | None:
    """(gate GEMV, its silu, up GEMV) when ``node`` multiplies silu(gate(x)) by up(x), one way round."""
    a, b = (plan.graph.nodes[i] for i in node.inputs)
    for act, up in ((a, b), (b, a)):
        if not (isinstance(act.op, ops.Activation) and act.op.fn is ActKind.SILU):
            continue
        gate = plan.graph.nodes[act.inputs[0]]
        if not (plan.is_gemv(gate) and plan.is_gemv(up)):
            continue
        same = (gate.inputs[0] == up.inputs[0] and gate.op.qtype == up.op.qtype
                and gate.op.n == up.op.n and gate.op.k == up.op.k)
        if same and {gate.id, act.id, up.id} <= plan.single and up.id != gate.id:
            return gate, act, up
    return None


def _fold_swiglu(plan: _Plan) -> None:
    """mul(silu(gemv_g(x)), gemv_u(x)) -> one dual-weight GEMV at the mul."""
    for node in plan.graph.nodes:
        found = _swiglu_pair(plan, node) if _is_binary(node, BinaryOp.MUL) else None
        if found is not None:
            gate, act, up = found
            plan.fused[node.id] = dataclasses.replace(_plain(gate), root=node, w_up=up.inputs[1],
                                                      absorbed=frozenset({gate.id, act.id, up.id}))
            plan.dropped |= {gate.id, act.id, up.id}


def _add_plain_gemvs(plan: _Plan) -> None:
    """Every other GEMV becomes a candidate too (for the residual, RoPE and norm folds)."""
    for node in plan.graph.nodes:
        if plan.is_gemv(node) and node.id not in plan.dropped:
            plan.fused[node.id] = _plain(node)


def _fold_residuals(plan: _Plan) -> None:
    """add(a, gemv) with the gemv read only there -> a residual epilogue at the add."""
    graph = plan.graph
    for node in graph.nodes:
        if not _is_binary(node, BinaryOp.ADD):
            continue
        left, right = node.inputs
        for other, mm in ((left, right), (right, left)):
            fusion = plan.fused.get(mm)
            if fusion is not None and fusion.residual is None and mm in plan.single and other != mm \
                    and graph.nodes[other].shape == node.shape and graph.nodes[mm].shape == node.shape:
                plan.refold(mm, node, residual=other)
                break


def _fold_ropes(plan: _Plan) -> None:
    """RopeKvAppend(gemv, ...) with a plain gemv read only there -> RoPE + KV append at the RopeKvAppend."""
    for node in plan.graph.nodes:
        if not isinstance(node.op, ops.RopeKvAppend):
            continue
        mm = node.inputs[0]
        fusion = plan.fused.get(mm)
        per_row = plan.graph.nodes[node.inputs[5]].shape != (1,)  # batched decode: its own slots
        if fusion is not None and mm in plan.single and fusion.plain and not per_row:
            plan.refold(mm, node, rope=node.op, rope_inputs=tuple(node.inputs[1:]))


def _fold_norms(plan: _Plan) -> None:
    """RMSNorm without beta whose every consumer is a fused GEMV reading it as x: each of them
    normalises x itself."""
    for node in plan.graph.nodes:
        if not (isinstance(node.op, ops.RmsNorm) and len(node.inputs) == 2) or node.id in plan.outputs:
            continue
        readers = {root: f for root, f in plan.fused.items() if f.x == node.id}
        consumers = set(plan.users[node.id])
        covered = set(readers) | (consumers & plan.dropped)
        if readers and consumers <= covered and all(f.w != node.id for f in readers.values()):
            for root, f in readers.items():
                plan.fused[root] = dataclasses.replace(f, x=node.inputs[0], gamma=node.inputs[1],
                                                       eps=node.op.eps, absorbed=f.absorbed | {node.id})
            plan.dropped.add(node.id)


def match_decode(graph: Graph, max_rows: int = 8, norm: bool = True, swiglu: bool = True,
                 residual: bool = True, rope: bool = True) -> list[GemvFusion]:
    """Every GEMV with something folded into it (the switches turn single folds off)."""
    users = graph.consumers()
    outputs = set(graph.outputs)
    single = {i for i, u in users.items() if len(u) == 1 and i not in outputs}
    plan = _Plan(graph, max_rows, users, outputs, single)
    if swiglu:
        _fold_swiglu(plan)
    _add_plain_gemvs(plan)
    if residual:
        _fold_residuals(plan)
    if rope:
        _fold_ropes(plan)
    if norm:
        _fold_norms(plan)
    return [f for f in plan.fused.values() if not f.plain]


def emit_decode(out: Graph, remap: Remap, fusion: GemvFusion, site: int) -> dict[int, Node]:
    """The FusedGgufMatMul: inputs x, w, then w_up, gamma, residual (those present), then RoPE's."""
    rope = fusion.rope
    rope_fields = {} if rope is None else {
        "head_dim": rope.head_dim, "q_width": rope.q_width, "kv_width": rope.kv_width,
        "n_rot": rope.n_rot, "interleaved": rope.interleaved}
    gemv = fusion.gemv
    op = ops.FusedGgufMatMul(gemv.qtype, gemv.n, gemv.k, fusion.eps, fusion.w_up is not None,
                             fusion.residual is not None, **rope_fields)
    ins = [fusion.x, fusion.w, *(i for i in (fusion.w_up, fusion.gamma, fusion.residual) if i is not None),
           *fusion.rope_inputs]
    return {fusion.root.id: out.apply(op, [remap[i] for i in ins], fusion.root.name)}


DECODE = register(Pattern("decode", match_decode, emit_decode))


def fuse_gguf_decode(graph: Graph, max_rows: int = 8, **switches: bool) -> Graph:
    """The graph with the decode fusions applied (``graph`` itself when nothing fuses); names of
    kept nodes and outputs are unchanged. ``switches``: norm, swiglu, residual, rope (all on)."""
    return rewrite(graph, match_decode(graph, max_rows, **switches), emit_decode)

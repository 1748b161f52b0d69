"""Transformer patterns: split QKV, packed BSHD attention, residual + LayerNorm/RMSNorm tee.

Each pattern removes whole steps and changes no arithmetic, so results are bit-identical with the
pattern off (the tests check exactly that):

* **split QKV** — an f32 matmul whose only readers are last-axis Narrows tiling its columns (q | k |
  v of a fused projection): one SplitMatMul writes each column part as its own contiguous block,
  and every Narrow becomes a view of its block. Saves one copy step per part.
* **packed BSHD attention** — an Attention whose q, k and v are token-major slices (through
  Reshape / Cast views) of one packed parent: PackedAttention reads them in place with the
  parent's row stride. Saves the narrow copies. ``RLX_WGPU_NO_PACKED_BSHD_ATTN`` turns it off.
* **residual + norm tee** — ``s = x + r`` read by a LayerNorm/RmsNorm: one ResidualNormTee step
  writes s (for the residual stream) and the norm; with no other reader of s the catalogue's
  FusedResidualLN / FusedResidualRmsNorm (when the norm has beta) does it without storing s.

Blocked results reach their readers as contiguous Narrow + Reshape views (ir/ops/norm.py).
Nodes keep their names: a replaced node's name moves to the view that stands for it, and
pass-made nodes get a ``:`` suffix, which builder names never use.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.attention import bshd_layout
from rlxpy.ir.ops.base import BinaryOp

PATTERNS = ("split_qkv", "packed_attention", "residual_norm")

#: emit(out graph, remap old id -> new node) -> new nodes for the old ids it stands for
Emit = Callable[[Graph, dict[int, Node]], dict[int, Node]]


def _last_axis(node: Node, graph: Graph) -> int:
    return node.op.axis % graph.nodes[node.inputs[0]].rank


def _view_of_part(out: Graph, blocked: Node, offset: int, length: int, shape, name: str) -> Node:
    """A contiguous run of ``blocked`` along axis 0 (elements of a 1-D SplitMatMul result, whole
    parts of a [parts, ...] tee) as a tensor of ``shape``: a view, no step."""
    part = out.narrow(blocked, 0, offset, length, name=f"{name}:part")
    return out.reshape(part, list(shape), name=name)


# -- split QKV ---------------------------------------------------------------------------------
def plan_split_qkv(graph: Graph) -> tuple[dict[int, Emit], set[int]]:
    users, outputs = graph.consumers(), set(graph.outputs)
    emits: dict[int, Emit] = {}
    replaced: set[int] = set()
    for mm in graph.nodes:
        if not isinstance(mm.op, (ops.MatMul, ops.FusedMatMulBiasAct)) or mm.id in outputs:
            continue
        x, w = (graph.nodes[i] for i in mm.inputs[:2])
        readers = [graph.nodes[i] for i in users[mm.id]]
        rows = math.prod(x.shape[:-1])
        if w.rank != 2 or mm.dtype is not DType.F32 or rows < 2 or len(readers) < 2 or not all(
                isinstance(r.op, ops.Narrow) and _last_axis(r, graph) == mm.rank - 1 for r in readers):
            continue  # (one row: last-axis narrows are views already)
        ranges = sorted({(r.op.start, r.op.length) for r in readers})
        if any(a[0] + a[1] != b[0] for a, b in zip(ranges, ranges[1:])) or ranges[0][0] != 0 \
                or ranges[-1][0] + ranges[-1][1] != w.shape[1] or min(length for _, length in ranges) == 0:
            continue  # the parts must tile the columns exactly once
        widths = tuple(length for _, length in ranges)
        activation = mm.op.activation if isinstance(mm.op, ops.FusedMatMulBiasAct) else None
        op = ops.SplitMatMul(widths, activation, isinstance(mm.op, ops.FusedMatMulBiasAct))
        offsets = dict(zip(ranges, op.part_offsets(rows)))

        def emit_matmul(out: Graph, remap: dict[int, Node], mm=mm, op=op) -> dict[int, Node]:
            return {mm.id: out.apply(op, [remap[i] for i in mm.inputs], f"{mm.name}:split")}

        emits[mm.id] = emit_matmul
        for r in readers:
            key = (r.op.start, r.op.length)

            def emit_part(out: Graph, remap: dict[int, Node], r=r, mm=mm, at=offsets[key]) -> dict[int, Node]:
                return {r.id: _view_of_part(out, remap[mm.id], at, r.numel, r.shape, r.name)}

            emits[r.id] = emit_part
        replaced |= {mm.id, *(r.id for r in readers)}
    return emits, replaced


# -- packed BSHD attention ---------------------------------------------------------------------
def _trace_slice(graph: Graph, node: Node, batch_seq: int) -> tuple[int, int, int, list[int]] | None:
    """(parent id, first column, row width, chain ids) when ``node`` is, through Reshape and
    same-dtype Cast views, a Narrow that takes one column run of every one of ``batch_seq`` rows."""
    chain = []
    while isinstance(node.op, (ops.Reshape, ops.Cast)):
        src = graph.nodes[node.inputs[0]]
        if src.dtype != node.dtype:
            return None
        chain.append(node.id)
        node = src
    if not isinstance(node.op, ops.Narrow):
        return None
    parent = graph.nodes[node.inputs[0]]
    axis = node.op.axis % parent.rank
    if math.prod(parent.shape[:axis]) != batch_seq:
        return None
    inner = math.prod(parent.shape[axis + 1:])
    return parent.id, node.op.start * inner, parent.shape[axis] * inner, chain + [node.id]


def plan_packed_attention(graph: Graph) -> tuple[dict[int, Emit], set[int]]:
    users, outputs = graph.consumers(), set(graph.outputs)
    emits: dict[int, Emit] = {}
    replaced: set[int] = set()
    for att in graph.nodes:
        if type(att.op) is not ops.Attention or att.op.dynamic_kv:
            continue
        op: ops.Attention = att.op  # type: ignore[assignment]
        q, k, v = (graph.nodes[i] for i in att.inputs[:3])
        token_major = bshd_layout(q.type, op.num_heads, op.head_dim) and all(
            bshd_layout(t.type, op.kv_heads, op.head_dim) for t in (k, v))
        if not token_major or q.dtype is not DType.F32:
            continue
        batch, seq = q.shape[0], q.shape[1]
        if k.shape[:2] != (batch, seq) or v.shape[:2] != (batch, seq):
            continue  # self-attention over the same tokens only
        slices = [_trace_slice(graph, t, batch * seq) for t in (q, k, v)]
        if any(s is None for s in slices) or len({(s[0], s[2]) for s in slices}) != 1:
            continue
        (parent, q_col, row, q_chain), (_, k_col, _, k_chain), (_, v_col, _, v_chain) = slices
        packed = ops.PackedAttention(op.num_heads, op.head_dim, op.num_kv_heads, op.mask_kind, op.score_scale,
                                     op.softcap, op.window, batch=batch, seq=seq, row=row, q_col=q_col,
                                     k_col=k_col, v_col=v_col)

        def emit(out: Graph, remap: dict[int, Node], att=att, packed=packed, parent=parent) -> dict:
            ins = [remap[parent], *(remap[i] for i in att.inputs[3:])]
            if packed.infer([n.type for n in ins]).shape == att.shape:
                return {att.id: out.apply(packed, ins, att.name)}
            node = out.apply(packed, ins, f"{att.name}:packed")  # [B, S, H*D] -> q's [B, S, H, D]
            return {att.id: out.reshape(node, list(att.shape), name=att.name)}

        emits[att.id] = emit
        replaced.add(att.id)
        # the slices' copies are dropped when this attention was their only reader
        for chain in (q_chain, k_chain, v_chain):
            for node_id in chain:
                if node_id in outputs or not set(users[node_id]) <= replaced | {att.id}:
                    break
                replaced.add(node_id)
    return emits, replaced


# -- residual + norm tee -----------------------------------------------------------------------
def plan_residual_norm(graph: Graph) -> tuple[dict[int, Emit], set[int]]:
    users, outputs = graph.consumers(), set(graph.outputs)
    emits: dict[int, Emit] = {}
    replaced: set[int] = set()
    for norm in graph.nodes:
        if not isinstance(norm.op, (ops.LayerNorm, ops.RmsNorm)) or norm.dtype is not DType.F32:
            continue
        s = graph.nodes[norm.inputs[0]]
        if norm.op.axis % norm.rank != norm.rank - 1 or s.id in replaced or not (
                isinstance(s.op, ops.Binary) and s.op.op is BinaryOp.ADD):
            continue
        x, r = (graph.nodes[i] for i in s.inputs)
        if x.type != s.type or r.type != s.type or x.id == r.id:
            continue
        others = [i for i in users[s.id] if i != norm.id]
        rms = isinstance(norm.op, ops.RmsNorm)
        weights = list(norm.inputs[1:])
        if not others and s.id not in outputs and len(weights) == 2:
            fused_type = ops.FusedResidualRmsNorm if rms else ops.FusedResidualLN
            fused_op = fused_type(False, norm.op.eps)

            def emit_fused(out: Graph, remap: dict[int, Node], norm=norm, s=s, fused_op=fused_op) -> dict:
                ins = [remap[i] for i in (*s.inputs, *norm.inputs[1:])]
                return {norm.id: out.apply(fused_op, ins, norm.name)}

            emits[norm.id] = emit_fused
            replaced |= {s.id, norm.id}
            continue
        # the tee writes s where it is emitted: at the norm (every other reader of s must come
        # later) or, when the norm's weights already exist, at the add itself
        if all(i > norm.id for i in others):
            at = norm.id
        elif max(weights) < s.id:
            at = s.id
        else:
            continue
        tee_op = ops.ResidualNormTee(rms, norm.op.eps)

        def emit_tee(out: Graph, remap: dict[int, Node], norm=norm, s=s, tee_op=tee_op) -> dict[int, Node]:
            tee = out.apply(tee_op, [remap[i] for i in (*s.inputs, *norm.inputs[1:])], f"{s.name}:tee")
            return {s.id: _view_of_part(out, tee, 0, 1, s.shape, s.name),
                    norm.id: _view_of_part(out, tee, 1, 1, norm.shape, norm.name)}

        emits[at] = emit_tee
        replaced |= {s.id, norm.id}
    return emits, replaced


PLANNERS = {"split_qkv": plan_split_qkv, "packed_attention": plan_packed_attention,
            "residual_norm": plan_residual_norm}


def rebuild(graph: Graph, emits: dict[int, Emit], replaced: set[int]) -> Graph:
    """A new graph: ``emits[i]`` runs at old node i's position and stands for the old nodes it
    returns; other ``replaced`` nodes vanish; everything else is copied, names unchanged."""
    out = Graph(graph.name)
    remap: dict[int, Node] = {}
    for node in graph.nodes:
        if node.id in emits:
            remap.update(emits[node.id](out, remap))
        if node.id in remap or node.id in replaced:
            continue
        remap[node.id] = out.apply(node.op, [remap[i] for i in node.inputs], node.name)
    out.output(*(remap[i] for i in graph.outputs))
    return out


def fuse_transformer(graph: Graph, skip: frozenset[str] | set[str] = frozenset()) -> Graph:
    """Apply every pattern of PATTERNS not in ``skip``, packed attention before split QKV (when
    both could take the same narrows, reading in place needs no step at all)."""
    unknown = set(skip) - set(PATTERNS) - {"decode"}
    if unknown:
        from rlxpy.errors import GraphError

        raise GraphError(f"unknown patterns {sorted(unknown)}; known: {', '.join(PATTERNS)}")
    for name in ("packed_attention", "split_qkv", "residual_norm"):
        if name not in skip:
            emits, replaced = PLANNERS[name](graph)
            if emits:
                graph = rebuild(graph, emits, replaced)
    return graph

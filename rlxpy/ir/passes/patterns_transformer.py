"""Transformer patterns (a pattern set of the engine in rewrite.py): split QKV, packed BSHD
attention, residual + LayerNorm/RMSNorm tee.

Each pattern removes whole steps and changes no arithmetic, so results are bit-identical with the
pattern off (the tests check exactly that):

* **split QKV** (``split_qkv``) — an f32 matmul whose only readers are last-axis Narrows tiling its
  columns (q | k | v of a fused projection): one SplitMatMul writes each column part as its own
  contiguous block, and every Narrow becomes a view of its block. Saves one copy step per part.
* **packed BSHD attention** (``packed_attention``) — an Attention whose q, k and v are token-major
  slices (through Reshape / Cast views) of one packed parent: PackedAttention reads them in place
  with the parent's row stride. Saves the narrow copies. Where a narrow stays (another node reads it:
  an attention gradient, a returned KV cache) and split QKV can make every narrow a view, split QKV
  is left to take them instead.
  ``RLX_WGPU_NO_PACKED_BSHD_ATTN`` turns it off.
* **residual + norm tee** (``residual_norm``) — ``s = x + r`` read by a LayerNorm/RmsNorm: one
  ResidualNormTee step writes s (for the residual stream) and the norm; with no other reader of s
  the catalogue's FusedResidualLN / FusedResidualRmsNorm (when the norm has beta) does it without
  storing s.

They are registered in the order they run: packed attention before split QKV (when both could take
the same narrows, reading in place needs no step at all), then the tee. Each pattern's match data
is a dataclass (:class:`SplitQkv`, :class:`PackedQkv`, :class:`ResidualNorm`).

Blocked results reach their readers as contiguous Narrow + Reshape views (ir/ops/norm.py).
Nodes keep their names: a replaced node's name moves to the view that stands for it, and
pass-made nodes get a ``:`` suffix, which builder names never use.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.attention import bshd_layout
from rlxpy.ir.ops.base import BinaryOp
from rlxpy.ir.passes.rewrite import Pattern, Remap, fuse, register

PATTERNS = ("split_qkv", "packed_attention", "residual_norm")


def _last_axis(node: Node, graph: Graph) -> int:
    return node.op.axis % graph.nodes[node.inputs[0]].rank


def _view_of_part(out: Graph, blocked: Node, offset: int, length: int, shape, name: str) -> Node:
    """A contiguous run of ``blocked`` along axis 0 (elements of a 1-D SplitMatMul result, whole
    parts of a [parts, ...] tee) as a tensor of ``shape``: a view, no step."""
    part = out.narrow(blocked, 0, offset, length, name=f"{name}:part")
    return out.reshape(part, list(shape), name=name)


# -- packed BSHD attention ---------------------------------------------------------------------
@dataclass(frozen=True)
class PackedQkv:
    """An Attention that reads q, k, v in place from ``parent``; ``slices`` are the views and
    narrows between them that only this attention read (they vanish)."""

    attention: Node
    op: ops.PackedAttention
    parent: int
    slices: frozenset[int]

    @property
    def sites(self) -> tuple[int, ...]:
        return (self.attention.id,)

    @property
    def replaced(self) -> frozenset[int]:
        return self.slices | {self.attention.id}


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


def _packed_op(graph: Graph, att: Node) -> tuple[ops.PackedAttention, int, list[list[int]]] | None:
    """(the PackedAttention, the parent id, q/k/v's slice chains) when ``att`` can read in place."""
    op: ops.Attention = att.op  # type: ignore[assignment]
    q, k, v = (graph.nodes[i] for i in att.inputs[:3])
    token_major = bshd_layout(q.type, op.num_heads, op.head_dim) and all(
        bshd_layout(t.type, op.kv_heads, op.head_dim) for t in (k, v))
    if not token_major or q.dtype is not DType.F32:
        return None
    batch, seq = q.shape[0], q.shape[1]
    if k.shape[:2] != (batch, seq) or v.shape[:2] != (batch, seq):
        return None  # self-attention over the same tokens only
    slices = [_trace_slice(graph, t, batch * seq) for t in (q, k, v)]
    if any(s is None for s in slices) or len({(s[0], s[2]) for s in slices}) != 1:
        return None
    (parent, q_col, row, q_chain), (_, k_col, _, k_chain), (_, v_col, _, v_chain) = slices
    packed = ops.PackedAttention(op.num_heads, op.head_dim, op.num_kv_heads, op.mask_kind, op.score_scale,
                                 op.softcap, op.window, batch=batch, seq=seq, row=row, q_col=q_col,
                                 k_col=k_col, v_col=v_col)
    return packed, parent, [q_chain, k_chain, v_chain]


def match_packed_attention(graph: Graph) -> list[PackedQkv]:
    users, outputs = graph.consumers(), set(graph.outputs)
    matches: list[PackedQkv] = []
    replaced: set[int] = set()
    splittable: set[int] | None = None  # parents whose narrows split QKV turns into views
    for att in graph.nodes:
        if type(att.op) is not ops.Attention or att.op.dynamic_kv:
            continue
        found = _packed_op(graph, att)
        if found is None:
            continue
        packed, parent, chains = found
        slices: set[int] = set()
        # the slices' copies are dropped when this attention was their only reader
        for chain in chains:
            for node_id in chain:
                if node_id in outputs or not set(users[node_id]) <= replaced | slices | {att.id}:
                    break
                slices.add(node_id)
        if not {chain[-1] for chain in chains} <= slices:
            # a narrow stays (another reader: an attention gradient, a returned KV cache): where split
            # QKV makes every narrow a view, that beats packing (which leaves the kept ones as copies)
            if splittable is None:
                splittable = {m.matmul.id for m in match_split_qkv(graph)}
            if parent in splittable:
                continue
        replaced |= slices | {att.id}
        matches.append(PackedQkv(att, packed, parent, frozenset(slices)))
    return matches


def emit_packed_attention(out: Graph, remap: Remap, match: PackedQkv, site: int) -> dict[int, Node]:
    att, packed = match.attention, match.op
    ins = [remap[match.parent], *(remap[i] for i in att.inputs[3:])]
    if packed.infer([n.type for n in ins]).shape == att.shape:
        return {att.id: out.apply(packed, ins, att.name)}
    node = out.apply(packed, ins, f"{att.name}:packed")  # [B, S, H*D] -> q's [B, S, H, D]
    return {att.id: out.reshape(node, list(att.shape), name=att.name)}


# -- split QKV ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SplitQkv:
    """A matmul whose column parts are written as blocks; ``parts`` maps each Narrow reader's id to
    (the reader, its block's offset in the blocked result)."""

    matmul: Node
    op: ops.SplitMatMul
    parts: dict[int, tuple[Node, int]]

    @property
    def sites(self) -> tuple[int, ...]:
        return (self.matmul.id, *self.parts)

    @property
    def replaced(self) -> frozenset[int]:
        return frozenset(self.sites)


def _column_parts(graph: Graph, mm: Node, readers: list[Node]) -> list[tuple[int, int]] | None:
    """The (start, length) runs of the readers, sorted, when they are last-axis Narrows that tile
    the weight's columns exactly once."""
    w = graph.nodes[mm.inputs[1]]
    if not all(isinstance(r.op, ops.Narrow) and _last_axis(r, graph) == mm.rank - 1 for r in readers):
        return None
    ranges = sorted({(r.op.start, r.op.length) for r in readers})
    if any(a[0] + a[1] != b[0] for a, b in zip(ranges, ranges[1:])) or ranges[0][0] != 0 \
            or ranges[-1][0] + ranges[-1][1] != w.shape[1] or min(length for _, length in ranges) == 0:
        return None
    return ranges


def match_split_qkv(graph: Graph) -> list[SplitQkv]:
    users, outputs = graph.consumers(), set(graph.outputs)
    matches: list[SplitQkv] = []
    for mm in graph.nodes:
        if not isinstance(mm.op, (ops.MatMul, ops.FusedMatMulBiasAct)) or mm.id in outputs:
            continue
        if getattr(mm.op, "transpose_a", False) or getattr(mm.op, "transpose_b", False):
            continue  # SplitMatMul reads its operands untransposed
        x, w = (graph.nodes[i] for i in mm.inputs[:2])
        readers = [graph.nodes[i] for i in users[mm.id]]
        rows = math.prod(x.shape[:-1])
        if w.rank != 2 or mm.dtype is not DType.F32 or rows < 2 or len(readers) < 2:
            continue  # (one row: last-axis narrows are views already)
        ranges = _column_parts(graph, mm, readers)
        if ranges is None:
            continue
        fused = isinstance(mm.op, ops.FusedMatMulBiasAct)
        activation = mm.op.activation if fused else None
        op = ops.SplitMatMul(tuple(length for _, length in ranges), activation, fused)
        offsets = dict(zip(ranges, op.part_offsets(rows)))
        parts = {r.id: (r, offsets[(r.op.start, r.op.length)]) for r in readers}
        matches.append(SplitQkv(mm, op, parts))
    return matches


def emit_split_qkv(out: Graph, remap: Remap, match: SplitQkv, site: int) -> dict[int, Node]:
    """At the matmul: the SplitMatMul; at each Narrow: the view of its block."""
    mm = match.matmul
    if site == mm.id:
        return {mm.id: out.apply(match.op, [remap[i] for i in mm.inputs], f"{mm.name}:split")}
    reader, offset = match.parts[site]
    return {reader.id: _view_of_part(out, remap[mm.id], offset, reader.numel, reader.shape, reader.name)}


# -- residual + norm tee -----------------------------------------------------------------------
@dataclass(frozen=True)
class ResidualNorm:
    """``norm(s)`` with ``s = add(x, r)``, emitted at ``at`` as ``op``: a ResidualNormTee (writes s
    and the norm) or a FusedResidualLN / FusedResidualRmsNorm (s has no other reader)."""

    add: Node
    norm: Node
    at: int
    op: ops.ResidualNormTee | ops.FusedResidualLN | ops.FusedResidualRmsNorm

    @property
    def sites(self) -> tuple[int, ...]:
        return (self.at,)

    @property
    def replaced(self) -> frozenset[int]:
        return frozenset({self.add.id, self.norm.id})


def _residual_sum(graph: Graph, norm: Node) -> Node | None:
    """The same-typed residual add that ``norm`` (an f32 last-axis LayerNorm/RmsNorm) reads."""
    if not isinstance(norm.op, (ops.LayerNorm, ops.RmsNorm)) or norm.dtype is not DType.F32:
        return None
    s = graph.nodes[norm.inputs[0]]
    is_add = isinstance(s.op, ops.Binary) and s.op.op is BinaryOp.ADD
    if norm.op.axis % norm.rank != norm.rank - 1 or not is_add:
        return None
    x, r = (graph.nodes[i] for i in s.inputs)
    return s if x.type == s.type and r.type == s.type and x.id != r.id else None


def _residual_norm(graph: Graph, norm: Node, s: Node, users: dict[int, list[int]], outputs: set[int]
                   ) -> ResidualNorm | None:
    others = [i for i in users[s.id] if i != norm.id]
    rms = isinstance(norm.op, ops.RmsNorm)
    weights = list(norm.inputs[1:])
    if not others and s.id not in outputs and len(weights) == 2:
        fused_type = ops.FusedResidualRmsNorm if rms else ops.FusedResidualLN
        return ResidualNorm(s, norm, norm.id, fused_type(False, norm.op.eps))
    # the tee writes s where it is emitted: at the norm (every other reader of s must come
    # later) or, when the norm's weights already exist, at the add itself
    if all(i > norm.id for i in others):
        return ResidualNorm(s, norm, norm.id, ops.ResidualNormTee(rms, norm.op.eps))
    if max(weights) < s.id:
        return ResidualNorm(s, norm, s.id, ops.ResidualNormTee(rms, norm.op.eps))
    return None


def match_residual_norm(graph: Graph) -> list[ResidualNorm]:
    users, outputs = graph.consumers(), set(graph.outputs)
    matches: list[ResidualNorm] = []
    taken: set[int] = set()  # sums already teed (by an earlier norm)
    for norm in graph.nodes:
        s = _residual_sum(graph, norm)
        found = None if s is None or s.id in taken else _residual_norm(graph, norm, s, users, outputs)
        if found is not None:
            matches.append(found)
            taken |= found.replaced
    return matches


def emit_residual_norm(out: Graph, remap: Remap, match: ResidualNorm, site: int) -> dict[int, Node]:
    s, norm = match.add, match.norm
    ins = [remap[i] for i in (*s.inputs, *norm.inputs[1:])]
    if not isinstance(match.op, ops.ResidualNormTee):
        return {norm.id: out.apply(match.op, ins, norm.name)}
    tee = out.apply(match.op, ins, f"{s.name}:tee")
    return {s.id: _view_of_part(out, tee, 0, 1, s.shape, s.name),
            norm.id: _view_of_part(out, tee, 1, 1, norm.shape, norm.name)}


register(Pattern("packed_attention", match_packed_attention, emit_packed_attention))
register(Pattern("split_qkv", match_split_qkv, emit_split_qkv))
register(Pattern("residual_norm", match_residual_norm, emit_residual_norm))


def fuse_transformer(graph: Graph, skip: Collection[str] = frozenset()) -> Graph:
    """Apply every pattern of PATTERNS not in ``skip`` (in their registration order); GraphError
    for a ``skip`` entry that is no pattern."""
    return fuse(graph, skip, only=PATTERNS)

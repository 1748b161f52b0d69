"""Conv patterns (a pattern set of the engine in rewrite.py): the conv epilogue.

* **conv epilogue** (``conv_epilogue``) — a Conv or ConvTranspose without bias or activation whose
  only reader is ``add(conv, b)`` with ``b`` one value per channel ([C, 1, ...] or [1, C, 1, ...]),
  and/or an Activation that is the only reader of the result: the conv takes ``b`` (reshaped to
  [C], a view) as its bias and the activation as its epilogue, so the add and the activation steps
  vanish. The kernel adds the bias and applies the activation in f32 exactly as the two element-wise
  steps would, so results are unchanged.
* **residual** — between the bias add (or the conv, without one) and the activation, an
  ``add(., r)`` whose other operand r has the conv output's type (a ResNet block's shortcut) joins
  the same epilogue (Conv's ``residual``): conv -> add(bias) -> add(r) -> relu is one step. The
  kernel adds the bias, then r, in f32, in the order the separate steps did.

The fused conv carries the name of the last node it stands for (the activation or the add).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rlxpy.ir import ops
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.base import BinaryOp
from rlxpy.ir.passes.rewrite import Pattern, Remap, register

CONVS = (ops.Conv, ops.ConvTranspose)


@dataclass(frozen=True)
class ConvEpilogue:
    """``conv`` (no bias, no activation) followed by an optional bias ``add`` (with the per-channel
    operand ``bias``) and an optional ``act``; at least one of the two is present."""

    conv: Node
    add: Node | None
    bias: Node | None
    act: Node | None
    expand: Node | None = None  # the unfuse pass's broadcast of the bias, read by the add alone
    radd: Node | None = None  # the add of the residual
    residual: Node | None = None  # its other operand

    @property
    def last(self) -> Node:
        return self.act or self.radd or self.add  # type: ignore[return-value]

    @property
    def sites(self) -> tuple[int, ...]:
        return (self.last.id,)

    @property
    def replaced(self) -> frozenset[int]:
        chain = (self.conv, self.add, self.act, self.expand, self.radd)
        return frozenset(n.id for n in chain if n is not None)


def _only_reader(node: Node, users: dict[int, list[int]], outputs: set[int]) -> int | None:
    readers = users[node.id]
    return readers[0] if len(readers) == 1 and node.id not in outputs else None


def _channel_bias(graph: Graph, conv: Node, add: Node, users: dict[int, list[int]]
                  ) -> tuple[Node, Node | None] | None:
    """(the operand of ``add`` that is one value per channel of ``conv``, the Expand broadcasting it
    (unfuse makes one) when only the add reads it), or None."""
    if not (isinstance(add.op, ops.Binary) and add.op.op is BinaryOp.ADD) or add.type != conv.type:
        return None
    a, b = add.inputs
    if a == b:
        return None
    other = graph.nodes[b if a == conv.id else a]
    expand = None
    if isinstance(other.op, ops.Expand) and users[other.id] == [add.id]:
        expand, other = other, graph.nodes[other.inputs[0]]
    shape = tuple(other.shape)
    while shape and shape[0] == 1 and len(shape) > conv.rank - 1:  # leading 1s (a batch dim of 1)
        shape = shape[1:]
    per_channel = shape == (conv.shape[1],) + (1,) * (conv.rank - 2)
    return (other, expand) if per_channel and other.dtype == conv.dtype and other.rank <= conv.rank else None


def _residual(graph: Graph, prev: Node, add: Node) -> Node | None:
    """The operand of ``add`` other than ``prev`` when it is an add of two values of prev's type."""
    if not (isinstance(add.op, ops.Binary) and add.op.op is BinaryOp.ADD) or add.type != prev.type:
        return None
    a, b = add.inputs
    if a == b:
        return None
    other = graph.nodes[b if a == prev.id else a]
    return other if other.type == prev.type else None


def match_conv_epilogue(graph: Graph) -> list[ConvEpilogue]:
    users, outputs = graph.consumers(), set(graph.outputs)
    matches = []
    claimed: set[int] = set()  # residual adds taken: both operands of a shortcut add may be conv chains
    for conv in graph.nodes:
        if not isinstance(conv.op, CONVS) or conv.op.activation is not None or len(conv.inputs) != 2:
            continue
        reader = _only_reader(conv, users, outputs)
        if reader is None:
            continue
        add = bias = act = expand = None
        found = _channel_bias(graph, conv, graph.nodes[reader], users)
        if found is not None:
            (bias, expand), add = found, graph.nodes[reader]
            reader = _only_reader(add, users, outputs)
        radd = residual = None
        if reader is not None and isinstance(conv.op, ops.Conv):
            residual = _residual(graph, add or conv, graph.nodes[reader])
            if residual is not None and reader not in claimed:
                radd = graph.nodes[reader]
                claimed.add(reader)
                reader = _only_reader(radd, users, outputs)
            else:
                residual = None
        if reader is not None and isinstance(graph.nodes[reader].op, ops.Activation):
            act = graph.nodes[reader]
        if add is not None or act is not None or radd is not None:
            matches.append(ConvEpilogue(conv, add, bias, act, expand, radd, residual))
    return matches


def emit_conv_epilogue(out: Graph, remap: Remap, match: ConvEpilogue, site: int) -> dict[int, Node]:
    conv, name = match.conv, match.last.name
    ins = [remap[i] for i in conv.inputs]
    if match.bias is not None:
        ins.append(out.reshape(remap[match.bias.id], [conv.shape[1]], name=f"{name}:bias"))
    op = dataclasses.replace(conv.op, activation=match.act.op.fn if match.act else None)
    if match.residual is not None:
        ins.append(remap[match.residual.id])
        op = dataclasses.replace(op, residual=True)
    return {match.last.id: out.apply(op, ins, name)}


register(Pattern("conv_epilogue", match_conv_epilogue, emit_conv_epilogue))

"""Conv patterns (a pattern set of the engine in rewrite.py): the conv epilogue.

* **conv epilogue** (``conv_epilogue``) — a Conv or ConvTranspose without bias or activation whose
  only reader is ``add(conv, b)`` with ``b`` one value per channel ([C, 1, ...] or [1, C, 1, ...]),
  and/or an Activation that is the only reader of the result: the conv takes ``b`` (reshaped to
  [C], a view) as its bias and the activation as its epilogue, so the add and the activation steps
  vanish. The kernel adds the bias and applies the activation in f32 exactly as the two element-wise
  steps would, so results are unchanged.

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

    @property
    def last(self) -> Node:
        return self.act or self.add  # type: ignore[return-value]

    @property
    def sites(self) -> tuple[int, ...]:
        return (self.last.id,)

    @property
    def replaced(self) -> frozenset[int]:
        return frozenset(n.id for n in (self.conv, self.add, self.act, self.expand) if n is not None)


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


def match_conv_epilogue(graph: Graph) -> list[ConvEpilogue]:
    users, outputs = graph.consumers(), set(graph.outputs)
    matches = []
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
        if reader is not None and isinstance(graph.nodes[reader].op, ops.Activation):
            act = graph.nodes[reader]
        if add is not None or act is not None:
            matches.append(ConvEpilogue(conv, add, bias, act, expand))
    return matches


def emit_conv_epilogue(out: Graph, remap: Remap, match: ConvEpilogue, site: int) -> dict[int, Node]:
    conv, name = match.conv, match.last.name
    ins = [remap[i] for i in conv.inputs]
    if match.bias is not None:
        ins.append(out.reshape(remap[match.bias.id], [conv.shape[1]], name=f"{name}:bias"))
    op = dataclasses.replace(conv.op, activation=match.act.op.fn if match.act else None)
    return {match.last.id: out.apply(op, ins, name)}


register(Pattern("conv_epilogue", match_conv_epilogue, emit_conv_epilogue))

"""The VJP registry and what a rule sees: ``@vjp(ops.X)`` registers the reverse-mode rule of an op,
``GradContext`` is the rule's view of the graph being differentiated.

A rule is ``fn(ctx, node, dy) -> [gradient or None per input of node]``: it appends to ``ctx.g`` (the
graph under construction, which already holds the forward) the nodes computing each input's
gradient from ``dy`` (the gradient of ``node``'s output, same type), returning None for an input
that needs none (``ctx.needs(node, i)`` is False: an index, a mask, a tensor the loss does not depend
on through it). A gradient has its input's exact type: broadcasting is reduced back by the rule
(``sum_to``). The family modules (``grad/<family>.py``, named as in ``ir/ops``) register into
``VJP``; the package imports every one of them, so the registry is full once ``rlxpy.ir.grad`` is
imported. Nothing here imports a family.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rlxpy.errors import GraphError, RegistryError, UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.ops.base import BinaryOp, CmpOp, ReduceOp
from rlxpy.ir.shape import Shape

#: sum_to sums a static run of at least TWO_STAGE_ROWS rows (a multiple of CHUNK_ROWS) in two stages.
TWO_STAGE_ROWS = 2048
CHUNK_ROWS = 32


@dataclass(frozen=True)
class Slice:
    """A gradient that is zero outside ``[start, start + value.shape[axis])`` along ``axis`` of its
    tensor (what a Narrow hands back): the traversal merges the slices that reach one tensor into one
    Concat, padded with zeros only where no slice lands (q, k and v narrowed from one QKV projection
    give back one concatenation, not three zero-padded copies and two sums)."""

    axis: int
    start: int
    value: Node


Grad = Node | Slice
VjpFn = Callable[["GradContext", Node, Node], Sequence[Grad | None]]
VJP: dict[type[ops.Op], VjpFn] = {}


def vjp(*op_types: type[ops.Op]) -> Callable[[VjpFn], VjpFn]:
    """Register the reverse-mode rule of ``op_types``; a second registration is an error."""

    def register(fn: VjpFn) -> VjpFn:
        for op_type in op_types:
            if op_type in VJP:
                other = VJP[op_type].__module__
                raise RegistryError(f"{op_type.__name__} already has a gradient rule in {other}")
            VJP[op_type] = fn
        return fn

    return register


def vjp_of(node: Node) -> VjpFn:
    """The rule of ``node``'s op; UnsupportedOpError naming the node when there is none."""
    rule = VJP.get(type(node.op))
    if rule is None:
        raise UnsupportedOpError(f"{where(node)}: no gradient rule for {type(node.op).__name__}, and the "
                                 "loss depends on a differentiated tensor through it")
    return rule


def differentiable(node: Node) -> bool:
    """Only float and complex tensors carry gradients (indices, masks and booleans do not); a complex
    tensor's gradient is complex, ``dL/d re + i dL/d im``."""
    return node.dtype.is_float or node.dtype is DType.C64


class GradContext:
    """A rule's view: ``g`` is the graph being built; ``needs(node, i)`` says whether input ``i`` of
    ``node`` wants a gradient; ``name(node, part)`` names a gradient node after its forward node."""

    def __init__(self, graph: Graph, active: Sequence[bool]) -> None:
        self.g = graph
        self.active = active

    def needs(self, node: Node, index: int) -> bool:
        return self.active[node.inputs[index]]

    def input(self, node: Node, index: int) -> Node:
        return self.g.nodes[node.inputs[index]]

    def inputs(self, node: Node) -> list[Node]:
        return [self.g.nodes[i] for i in node.inputs]

    def name(self, node: Node, part: str) -> str:
        """``<node>/d<part>``, made unique."""
        base = f"{node.name}/d{part}"
        candidate, count = base, 0
        while self.has(candidate):
            count += 1
            candidate = f"{base}_{count}"
        return candidate

    def has(self, name: str) -> bool:
        try:
            self.g[name]
        except KeyError:
            return False
        return True

    # -- summing the gradients that reach one tensor ------------------------------------------------
    def combine(self, parts: Sequence[Grad], like: Node, name: str | None = None) -> Node:
        """The sum of ``parts`` (full gradients and Slices) as one gradient of ``like``'s type: the
        largest set of disjoint slices along one axis becomes one Concat, other slices are padded."""
        full = [p for p in parts if isinstance(p, Node)]
        slices = sorted((p for p in parts if isinstance(p, Slice)), key=lambda p: (p.axis, p.start))
        if slices:
            axis = max({p.axis for p in slices}, key=lambda a: sum(p.axis == a for p in slices))
            merged, rest, end = [], [], 0
            for part in slices:
                if part.axis == axis and part.start >= end:
                    merged.append(part)
                    end = part.start + part.value.shape[axis]
                else:
                    rest.append(part)
            full.append(self._padded(merged, axis, like))
            full += [self._padded([part], part.axis, like) for part in rest]
        total = full[0]
        for value in full[1:]:
            total = self._sum(total, value)
        return total

    def _sum(self, a: Node, b: Node) -> Node:
        """a + b; complex gradients add as their (re, im) pairs (element-wise kernels take real words)."""
        if a.dtype is not DType.C64:
            return self.add(a, b)
        pairs = self.add(self.g.apply(ops.ComplexView(False), [a]), self.g.apply(ops.ComplexView(False), [b]))
        return self.g.apply(ops.ComplexView(True), [pairs])

    def _padded(self, parts: Sequence[Slice], axis: int, like: Node) -> Node:
        """Disjoint slices along ``axis`` (in order) with zeros between them: one Concat; or, when the
        slices are Narrows of one tensor of ``like``'s type that tile it in order (a rule that wrote
        its inputs' gradients side by side, AttentionBackward's PACKED), that tensor."""
        whole = self._tiled_by(parts, axis, like)
        if whole is not None:
            return whole
        pieces, at = [], 0
        for part in parts:
            if part.start > at:
                pieces.append(self.zeros_shaped(like, axis, part.start - at))
            pieces.append(part.value)
            at = part.start + part.value.shape[axis]
        if at < like.shape[axis]:
            pieces.append(self.zeros_shaped(like, axis, like.shape[axis] - at))
        return pieces[0] if len(pieces) == 1 else self.g.concat(pieces, axis)

    def _tiled_by(self, parts: Sequence[Slice], axis: int, like: Node) -> Node | None:
        """The tensor that ``parts`` (sorted by start) narrow in order, covering its ``axis``; None when
        they do not."""
        sources = set()
        at = 0
        for part in parts:
            op = part.value.op
            if not isinstance(op, ops.Narrow) or part.start != at:
                return None
            source = self.g.nodes[part.value.inputs[0]]
            if op.axis % source.rank != axis or op.start != at:
                return None
            sources.add(source.id)
            at += op.length
        if len(sources) != 1:
            return None
        source = self.g.nodes[sources.pop()]
        return source if source.type == like.type and at == like.shape[axis] else None

    def zeros_shaped(self, like: Node, axis: int, length: int) -> Node:
        """Zeros of ``like``'s dtype and shape with ``length`` along ``axis``."""
        shape = list(like.shape)
        shape[axis] = length
        zero = self.g.constant(np.zeros((1,) * like.rank), dtype=like.dtype)
        return self.g.expand(zero, shape) if any(d != 1 for d in shape) else zero

    # -- small builders -------------------------------------------------------------------------
    def scalar(self, value: float, like: Node) -> Node:
        """A 0-d constant of ``like``'s dtype (Binary broadcasts it)."""
        return self.g.constant(np.asarray(value, dtype=np.float64), dtype=like.dtype)

    def zeros(self, like: Node) -> Node:
        """Zeros of ``like``'s type: a broadcast one-element constant (no big constant in the graph)."""
        zero = self.g.constant(np.zeros((1,) * like.rank), dtype=like.dtype)
        return zero if like.numel == 1 else self.g.expand(zero, like.shape)

    def binary(self, a: Node, b: Node | float, op: BinaryOp, name: str | None = None) -> Node:
        other = self.scalar(b, a) if isinstance(b, (int, float)) else b
        return self.g.apply(ops.Binary(op), [a, other], name)

    def mul(self, a: Node, b: Node | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.MUL, name)

    def add(self, a: Node, b: Node | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.ADD, name)

    def sub(self, a: Node, b: Node | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.SUB, name)

    def div(self, a: Node, b: Node | float, name: str | None = None) -> Node:
        return self.binary(a, b, BinaryOp.DIV, name)

    def neg(self, a: Node, name: str | None = None) -> Node:
        return self.g.apply(ops.Activation(ops.ActKind.NEG), [a], name)

    def compare(self, a: Node, b: Node | float, op: CmpOp) -> Node:
        other = self.scalar(b, a) if isinstance(b, (int, float)) else b
        return self.g.apply(ops.Compare(op), [a, other])

    def where(self, cond: Node, on_true: Node | float, on_false: Node | float, like: Node,
              name: str | None = None) -> Node:
        """``where(cond, on_true, on_false)``, number branches as 0-d constants of ``like``'s dtype."""
        a = self.scalar(on_true, like) if isinstance(on_true, (int, float)) else on_true
        b = self.scalar(on_false, like) if isinstance(on_false, (int, float)) else on_false
        return self.g.apply(ops.Where(), [cond, a, b], name)

    def reduce_sum(self, x: Node, axes: Sequence[int], keep_dim: bool, name: str | None = None) -> Node:
        return self.g.apply(ops.Reduce(ReduceOp.SUM, tuple(axes), keep_dim), [x], name)

    def sum_to(self, grad: Node, shape: Shape, name: str | None = None) -> Node:
        """``grad`` summed over the axes broadcasting added (left padding and size-1 dims of
        ``shape``), reshaped to ``shape``: the adjoint of numpy's broadcast_to."""
        shape = tuple(shape)
        if tuple(grad.shape) == shape:
            return grad
        lead = grad.rank - len(shape)
        if lead < 0:
            raise GraphError(f"{grad.name}: gradient {grad.type} cannot be summed to {list(shape)}")
        padded = (1,) * lead + shape
        axes = [a for a in range(grad.rank) if padded[a] == 1 and grad.shape[a] != 1]
        out = grad
        for run in contiguous_runs(axes):  # Reduce takes contiguous axes only
            out = self.sum_run(out, run)
        return self.g.reshape(out, shape, name) if tuple(out.shape) != shape else out

    def sum_run(self, x: Node, run: Sequence[int]) -> Node:
        """``x`` summed over the contiguous axes ``run``, kept as size 1. A long static run (a bias's
        gradient over every token) is summed in two stages, chunks of CHUNK_ROWS rows and then the chunk
        sums, so the sum spreads over as many GPU workgroups as there are chunks rather than over the
        few columns alone."""
        sizes = [x.shape[a] for a in run]
        if not all(isinstance(d, int) for d in sizes) or math.prod(sizes) < TWO_STAGE_ROWS \
                or math.prod(sizes) % CHUNK_ROWS:
            return self.reduce_sum(x, run, keep_dim=True)
        before, after = tuple(x.shape[:run[0]]), tuple(x.shape[run[-1] + 1:])
        chunks = math.prod(sizes) // CHUNK_ROWS
        split = self.g.reshape(x, before + (chunks, CHUNK_ROWS) + after)
        partial = self.reduce_sum(split, [len(before) + 1], keep_dim=False)
        total = self.reduce_sum(partial, [len(before)], keep_dim=True)
        return self.g.reshape(total, before + (1,) * len(run) + after)


    def fit(self, grad: Node, like: Node, name: str | None = None) -> Node:
        """``grad`` summed back to ``like``'s shape (``sum_to``) and cast to its dtype."""
        if grad.dtype != like.dtype:
            grad = self.g.cast(grad, like.dtype)
        return self.sum_to(grad, like.shape, name)

def contiguous_runs(axes: Sequence[int]) -> list[tuple[int, ...]]:
    """[0, 1, 3] -> [(0, 1), (3,)]."""
    runs: list[list[int]] = []
    for axis in sorted(axes):
        if runs and runs[-1][-1] == axis - 1:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    return [tuple(r) for r in runs]

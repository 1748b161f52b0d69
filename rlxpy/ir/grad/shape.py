"""Gradient rules of the shape family: Reshape, Transpose, Narrow, Concat, Expand, Gather,
ScatterAdd and Resize. Indices carry no gradient.

Narrow's gradient is a Slice (dy in the narrowed range; the traversal merges the slices of one tensor
into one zero-padded Concat); Expand's sums the broadcast axes;
Gather's is the backward family's GatherBackward (a scatter-add that clamps indices like the
forward); ScatterAdd's gathers dy at each update's row and zeroes updates whose row was skipped;
Resize's multiplies dy by the transposed sampling matrix of each resized dim.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.grad.core import Grad, GradContext, Slice, vjp
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import CmpOp
from rlxpy.ir.reference.shape import ref_resize
from rlxpy.ir.shape import normalize_axis


@vjp(ops.Reshape)
def grad_reshape(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    x = ctx.input(node, 0)
    return [ctx.g.reshape(dy, x.shape, ctx.name(node, "x"))]


@vjp(ops.Transpose)
def grad_transpose(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    inverse = [0] * len(node.op.perm)
    for i, p in enumerate(node.op.perm):
        inverse[p] = i
    return [ctx.g.transpose(dy, inverse, ctx.name(node, "x"))]


@vjp(ops.Narrow)
def grad_narrow(ctx: GradContext, node: Node, dy: Node) -> list[Grad | None]:
    """dy in the narrowed range, zeros elsewhere: a Slice, merged with its siblings by the traversal."""
    x = ctx.input(node, 0)
    op: ops.Narrow = node.op  # type: ignore[assignment]
    axis = normalize_axis(op.axis, x.rank)
    return [dy if op.length == x.shape[axis] else Slice(axis, op.start, dy)]


@vjp(ops.Concat)
def grad_concat(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    axis = normalize_axis(node.op.axis, node.rank)
    grads: list[Node | None] = []
    start = 0
    for i, x in enumerate(ctx.inputs(node)):
        length = x.shape[axis]
        grads.append(ctx.g.narrow(dy, axis, start, length, ctx.name(node, f"x{i}")) if ctx.needs(node, i)
                     else None)
        start += length
    return grads


@vjp(ops.Expand)
def grad_expand(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    x = ctx.input(node, 0)
    return [ctx.sum_to(dy, x.shape, ctx.name(node, "x"))]


@vjp(ops.Gather)
def grad_gather(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    table, idx = ctx.inputs(node)
    axis = normalize_axis(node.op.axis, table.rank)
    return [ctx.g.gather_backward(dy, idx, table.shape[axis], axis, ctx.name(node, "table")), None]


@vjp(ops.ScatterAdd)
def grad_scatter_add(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    updates, idx = ctx.inputs(node)
    out_dim = node.op.out_dim
    picked = ctx.g.gather(dy, idx, 0)  # clamps out-of-range rows: those are zeroed below
    inside = ctx.g.cast(ctx.compare(idx, -1, CmpOp.GT), updates.dtype) if idx.dtype.is_float else \
        ctx.g.cast(ctx.compare(idx, 0, CmpOp.GE), updates.dtype)
    below = ctx.g.cast(ctx.compare(idx, out_dim, CmpOp.LT), updates.dtype)
    keep = ctx.mul(inside, below)
    keep = ctx.g.reshape(keep, (keep.shape[0],) + (1,) * (updates.rank - 1))
    return [ctx.mul(picked, keep, ctx.name(node, "updates")), None]


def resize_matrix(op: ops.Resize, dim: int, size_in: int) -> np.ndarray:
    """[out, in]: resized dim ``dim`` of Resize as a matrix (row o holds the weights output o gives its
    source elements), taken from the reference itself by resampling the identity, in float64."""
    steps = (op.steps[dim],) if op.steps else ()
    single = replace(op, sizes=(op.sizes[dim],), steps=steps)
    return np.asarray(ref_resize(single, [np.eye(size_in)], None)).T


@vjp(ops.Resize)
def grad_resize(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """Resize samples one resized dim after the other, each a fixed linear map (nearest: one 1 per
    row; linear: two weights), so dx applies their transposes: per dim a MatMul of dy with the
    [out, in] matrix of that dim, the dim moved last and back."""
    op: ops.Resize = node.op  # type: ignore[assignment]
    x = ctx.input(node, 0)
    first = x.rank - len(op.sizes)
    grad = dy
    for dim in reversed(range(len(op.sizes))):
        axis = first + dim
        matrix = ctx.g.constant(resize_matrix(op, dim, x.shape[axis]), dtype=dy.dtype)
        perm = [a for a in range(x.rank) if a != axis] + [axis]
        moved = grad if axis == x.rank - 1 else ctx.g.transpose(grad, perm)
        grad = ctx.g.matmul(moved, matrix)
        if axis != x.rank - 1:
            back = [0] * x.rank
            for i, p in enumerate(perm):
                back[p] = i
            grad = ctx.g.transpose(grad, back)
    return [ctx.g.reshape(grad, x.shape, ctx.name(node, "x"))]

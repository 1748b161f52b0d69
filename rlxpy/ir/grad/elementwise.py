"""Gradient rules of the element-wise family: activations, binary ops, select, casts and copies.

Each derivative is torch's (tools/autograd/derivatives.yaml). An activation's is one fused
ActivationBackward (backward family: ReLU's from its output, ``y <= 0`` gives 0; abs's is 0 at 0;
round's is 0); the others are written with IR primitives: maximum/minimum split a tie evenly, pow's
exponent gradient is 0 where the base is 0 and the exponent >= 0.
"""

from __future__ import annotations

from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.backward import FROM_OUTPUT
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp


def activation_grad(ctx: GradContext, kind: ActKind, x: Node | None, y: Node, dy: Node,
                    name: str | None = None) -> Node:
    """dx of ``y = kind(x)`` given dy: one ActivationBackward, reading y for the kinds whose
    derivative y gives (``x`` may then be None), else x."""
    of_output = kind in FROM_OUTPUT
    t = y if of_output else x
    if t is None:
        raise GraphError(f"{y.name}: the derivative of {kind.name} needs the activation's input")
    return ctx.g.activation_backward(t, dy, kind, of_output, name)


@vjp(ops.Activation)
def grad_activation(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    return [activation_grad(ctx, node.op.fn, ctx.input(node, 0), node, dy, ctx.name(node, "x"))]


def _pow_grads(ctx: GradContext, node: Node, a: Node, b: Node, dy: Node) -> tuple[Node | None, Node | None]:
    da = db = None
    if ctx.needs(node, 0):  # b a^(b-1), 0 where b == 0 (torch: no NaN from 0^-1 * 0)
        slope = ctx.mul(b, ctx.g.pow(a, ctx.sub(b, 1.0)))
        da = ctx.where(ctx.compare(b, 0.0, CmpOp.EQ), 0.0, ctx.mul(dy, slope), dy)
    if ctx.needs(node, 1):  # y log(a), 0 where a == 0 and b >= 0
        zero_base = ctx.mul(ctx.g.cast(ctx.compare(a, 0.0, CmpOp.EQ), dy.dtype),
                            ctx.g.cast(ctx.compare(b, 0.0, CmpOp.GE), dy.dtype))
        slope = ctx.mul(node, ctx.g.activation(a, ActKind.LOG))
        db = ctx.where(ctx.compare(zero_base, 0.0, CmpOp.NE), 0.0, ctx.mul(dy, slope), dy)
    return da, db


def _extreme_grads(ctx: GradContext, node: Node, a: Node, b: Node, dy: Node, loses_a: CmpOp
                   ) -> tuple[Node, Node]:
    """maximum (loses_a = LT) / minimum (GT): the winner takes dy, a tie splits it, NaN passes it."""
    loses_b = CmpOp.GT if loses_a is CmpOp.LT else CmpOp.LT
    tie = ctx.compare(a, b, CmpOp.EQ)
    half = ctx.mul(dy, 0.5)
    da = ctx.where(tie, half, ctx.where(ctx.compare(a, b, loses_a), 0.0, dy, dy), dy)
    db = ctx.where(tie, half, ctx.where(ctx.compare(a, b, loses_b), 0.0, dy, dy), dy)
    return da, db


@vjp(ops.Binary)
def grad_binary(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    a, b = ctx.inputs(node)
    kind = node.op.op
    if kind is BinaryOp.ADD:
        da, db = dy, dy
    elif kind is BinaryOp.SUB:
        da, db = dy, (ctx.neg(dy) if ctx.needs(node, 1) else None)
    elif kind is BinaryOp.MUL:
        da = ctx.mul(dy, b) if ctx.needs(node, 0) else None
        db = ctx.mul(dy, a) if ctx.needs(node, 1) else None
    elif kind is BinaryOp.DIV:  # torch: -dy a / (b b)
        da = ctx.div(dy, b) if ctx.needs(node, 0) else None
        db = ctx.neg(ctx.div(ctx.mul(dy, a), ctx.mul(b, b))) if ctx.needs(node, 1) else None
    elif kind is BinaryOp.POW:
        da, db = _pow_grads(ctx, node, a, b, dy)
    else:
        da, db = _extreme_grads(ctx, node, a, b, dy, CmpOp.LT if kind is BinaryOp.MAX else CmpOp.GT)
    return [ctx.fit(da, a, ctx.name(node, "a")) if da is not None and ctx.needs(node, 0) else None,
            ctx.fit(db, b, ctx.name(node, "b")) if db is not None and ctx.needs(node, 1) else None]


@vjp(ops.Where)
def grad_where(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    cond, on_true, on_false = ctx.inputs(node)
    return [None,
            ctx.fit(ctx.where(cond, dy, 0.0, dy), on_true, ctx.name(node, "on_true"))
            if ctx.needs(node, 1) else None,
            ctx.fit(ctx.where(cond, 0.0, dy, dy), on_false, ctx.name(node, "on_false"))
            if ctx.needs(node, 2) else None]


@vjp(ops.Cast)
def grad_cast(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    x = ctx.input(node, 0)
    return [ctx.g.cast(dy, x.dtype, ctx.name(node, "x")) if x.dtype != dy.dtype else dy]


@vjp(ops.Copy)
def grad_copy(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    return [dy]


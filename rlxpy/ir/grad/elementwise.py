"""Gradient rules of the element-wise family: activations, binary ops, select, casts and copies.

Each derivative is torch's (tools/autograd/derivatives.yaml), written with IR primitives: ReLU's
uses its output (``y <= 0`` gives 0), maximum/minimum split a tie evenly, pow's exponent gradient is
0 where the base is 0 and the exponent >= 0, abs's is 0 at 0, round's is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp

Act = ops.ActKind


def _act(ctx: GradContext, kind: ActKind, x: Node) -> Node:
    return ctx.g.activation(x, kind)


def _gelu_slope(ctx: GradContext, x: Node) -> Node:
    """d/dx of x * Phi(x): Phi(x) + x phi(x). Phi has no primitive (no erf), so it is gelu(x) / x,
    exact in f32 since gelu(x) = x * (Phi(x) rounded), with Phi(0) = 1/2 by hand."""
    zero = ctx.compare(x, 0.0, CmpOp.EQ)
    safe = ctx.where(zero, 1.0, x, x)
    cdf = ctx.where(zero, 0.5, ctx.div(_act(ctx, Act.GELU, x), safe), x)
    pdf = ctx.mul(_act(ctx, Act.EXP, ctx.mul(ctx.mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
    return ctx.add(cdf, ctx.mul(x, pdf))


def _gelu_approx_slope(ctx: GradContext, x: Node) -> Node:
    """d/dx of 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    k = math.sqrt(2.0 / math.pi)
    x2 = ctx.mul(x, x)
    u = ctx.mul(ctx.mul(x, ctx.add(ctx.mul(x2, 0.044715), 1.0)), k)
    t = _act(ctx, Act.TANH, u)
    du = ctx.mul(ctx.add(ctx.mul(x2, 3 * 0.044715), 1.0), k)
    sech2 = ctx.sub(ctx.scalar(1.0, x), ctx.mul(t, t))
    return ctx.add(ctx.mul(ctx.add(t, 1.0), 0.5), ctx.mul(ctx.mul(ctx.mul(x, 0.5), sech2), du))


#: dy -> dx of each activation, given (ctx, x, y, dy).
ACTIVATION_GRADS: dict[ActKind, Callable[[GradContext, Node, Node, Node], Node]] = {
    Act.RELU: lambda c, x, y, dy: c.where(c.compare(y, 0.0, CmpOp.LE), 0.0, dy, dy),
    Act.SIGMOID: lambda c, x, y, dy: c.mul(dy, c.mul(y, c.sub(c.scalar(1.0, y), y))),
    Act.TANH: lambda c, x, y, dy: c.mul(dy, c.sub(c.scalar(1.0, y), c.mul(y, y))),
    Act.EXP: lambda c, x, y, dy: c.mul(dy, y),
    Act.LOG: lambda c, x, y, dy: c.div(dy, x),
    Act.SQRT: lambda c, x, y, dy: c.div(dy, c.mul(y, 2.0)),
    Act.RSQRT: lambda c, x, y, dy: c.mul(dy, c.mul(c.mul(c.mul(y, y), y), -0.5)),
    Act.NEG: lambda c, x, y, dy: c.neg(dy),
    Act.ABS: lambda c, x, y, dy: c.where(c.compare(x, 0.0, CmpOp.GT), dy,
                                         c.where(c.compare(x, 0.0, CmpOp.LT), c.neg(dy), 0.0, dy), dy),
    Act.GELU: lambda c, x, y, dy: c.mul(dy, _gelu_slope(c, x)),
    Act.GELU_APPROX: lambda c, x, y, dy: c.mul(dy, _gelu_approx_slope(c, x)),
    Act.SILU: lambda c, x, y, dy: c.mul(dy, _silu_slope(c, x)),
    Act.ROUND: lambda c, x, y, dy: c.zeros(x),
    Act.SIN: lambda c, x, y, dy: c.mul(dy, _act(c, Act.COS, x)),
    Act.COS: lambda c, x, y, dy: c.neg(c.mul(dy, _act(c, Act.SIN, x))),
    Act.TAN: lambda c, x, y, dy: c.mul(dy, c.add(c.mul(y, y), 1.0)),
    Act.ATAN: lambda c, x, y, dy: c.div(dy, c.add(c.mul(x, x), 1.0)),
}
#: Activations whose gradient needs only the output (a fused matmul may keep them fused).
FROM_OUTPUT = frozenset({Act.RELU, Act.SIGMOID, Act.TANH, Act.EXP, Act.NEG})


def _silu_slope(ctx: GradContext, x: Node) -> Node:
    """d/dx of x sigmoid(x): s (1 + x (1 - s))."""
    s = _act(ctx, Act.SIGMOID, x)
    return ctx.mul(s, ctx.add(ctx.mul(x, ctx.sub(ctx.scalar(1.0, s), s)), 1.0))


def activation_grad(ctx: GradContext, kind: ActKind, x: Node, y: Node, dy: Node) -> Node:
    """dx of ``y = kind(x)`` given dy (``x`` may be None for the kinds of FROM_OUTPUT)."""
    return ACTIVATION_GRADS[kind](ctx, x, y, dy)


@vjp(ops.Activation)
def grad_activation(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    x = ctx.input(node, 0)
    return [ctx.fit(activation_grad(ctx, node.op.fn, x, node, dy), x, ctx.name(node, "x"))]


def _pow_grads(ctx: GradContext, node: Node, a: Node, b: Node, dy: Node) -> tuple[Node | None, Node | None]:
    da = db = None
    if ctx.needs(node, 0):  # b a^(b-1), 0 where b == 0 (torch: no NaN from 0^-1 * 0)
        slope = ctx.mul(b, ctx.g.pow(a, ctx.sub(b, 1.0)))
        da = ctx.where(ctx.compare(b, 0.0, CmpOp.EQ), 0.0, ctx.mul(dy, slope), dy)
    if ctx.needs(node, 1):  # y log(a), 0 where a == 0 and b >= 0
        zero_base = ctx.mul(ctx.g.cast(ctx.compare(a, 0.0, CmpOp.EQ), dy.dtype),
                            ctx.g.cast(ctx.compare(b, 0.0, CmpOp.GE), dy.dtype))
        slope = ctx.mul(node, _act(ctx, Act.LOG, a))
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


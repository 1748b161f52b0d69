"""Gradient rules of the matmul family: MatMul and FusedMatMulBiasAct (the composites DotGeneral,
LoraMatMul and FusedSwiGLU are differentiated through their unfused primitives).

``a [..., M, K] @ b [K, N]``: ``da = dy b^T``, ``db = a^T dy`` with a's leading dims folded into M;
batched ``a [L..., M, K] @ b [L..., K, N]``: the same per batch. Transposes are explicit nodes.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.grad.elementwise import activation_grad
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.backward import FROM_OUTPUT


def _swap_last(ctx: GradContext, x: Node) -> Node:
    perm = list(range(x.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return ctx.g.transpose(x, perm)


def matmul_grads(ctx: GradContext, node: Node, a: Node, b: Node, dy: Node, want_a: bool, want_b: bool,
                 parts: tuple[str, str] = ("a", "b")) -> tuple[Node | None, Node | None]:
    """(da, db) of ``dy = d(a @ b)`` on the shapes MatMul accepts; ``parts`` name the two gradients."""
    da = db = None
    if want_a:
        da = ctx.g.matmul(dy, _swap_last(ctx, b), ctx.name(node, parts[0]))
    if want_b:
        if b.rank == 2 and a.rank > 2:  # fold a's leading dims into its rows
            rows = math.prod(a.shape[:-1])
            a2 = ctx.g.reshape(a, (rows, a.shape[-1]))
            dy2 = ctx.g.reshape(dy, (rows, dy.shape[-1]))
            db = ctx.g.matmul(_swap_last(ctx, a2), dy2, ctx.name(node, parts[1]))
        else:
            db = ctx.g.matmul(_swap_last(ctx, a), dy, ctx.name(node, parts[1]))
    return da, db


@vjp(ops.MatMul)
def grad_matmul(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    a, b = ctx.inputs(node)
    return list(matmul_grads(ctx, node, a, b, dy, ctx.needs(node, 0), ctx.needs(node, 1)))


@vjp(ops.FusedMatMulBiasAct)
def grad_fused_matmul(ctx: GradContext, node: Node, dy: Node) -> list[Node | None]:
    """z = x @ w + bias, y = act(z): the activation's gradient first; z is recomputed when the
    activation needs it (the autodiff pass splits such nodes beforehand, so this is a fallback)."""
    x, w, bias = ctx.inputs(node)
    act = node.op.activation
    dz = dy
    if act is not None:
        z = None if act in FROM_OUTPUT else ctx.g.linear(x, w, bias, name=ctx.name(node, "recomputed"))
        dz = activation_grad(ctx, act, z, node, dy)
    dx, dw = matmul_grads(ctx, node, x, w, dz, ctx.needs(node, 0), ctx.needs(node, 1), ("x", "w"))
    dbias = None
    if ctx.needs(node, 2):
        dbias = ctx.sum_to(dz, bias.shape, ctx.name(node, "bias"))
    return [dx, dw, dbias]

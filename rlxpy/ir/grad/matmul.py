"""Gradient rules of the matmul family: MatMul and FusedMatMulBiasAct (the composites DotGeneral,
LoraMatMul and FusedSwiGLU are differentiated through their unfused primitives).

``y = A B`` with ``A = a`` or ``a^T`` (MatMul's transpose_a) and ``B = b`` or ``b^T`` (transpose_b):
``dA = dy B^T`` and ``dB = A^T dy``, so ``da = dy B^T`` (or ``B dy^T`` for a transposed a) and
``db = A^T dy`` (or ``dy^T A``). Every transpose there is a MatMul flag, read in place by the GEMM,
never a Transpose node; a 2-D ``b`` folds a's leading dims into its rows for ``db``.
"""

from __future__ import annotations

import math

from rlxpy.ir import ops
from rlxpy.ir.grad.core import GradContext, vjp
from rlxpy.ir.grad.elementwise import activation_grad
from rlxpy.ir.graph import Node
from rlxpy.ir.ops.backward import FROM_OUTPUT


def _product(ctx: GradContext, x: Node, y: Node, name: str, transpose_x: bool = False,
             transpose_y: bool = False) -> Node:
    """``op(x) @ op(y)``, op transposing the last two dims where asked."""
    return ctx.g.apply(ops.MatMul(transpose_x, transpose_y), [x, y], name)


def matmul_grads(ctx: GradContext, node: Node, a: Node, b: Node, dy: Node, want_a: bool, want_b: bool,
                 parts: tuple[str, str] = ("a", "b")) -> tuple[Node | None, Node | None]:
    """(da, db) of ``dy = d(A @ B)`` on the shapes MatMul accepts; ``parts`` name the two gradients."""
    trans_a, trans_b = getattr(node.op, "transpose_a", False), getattr(node.op, "transpose_b", False)
    da = db = None
    if want_a:
        name = ctx.name(node, parts[0])
        if trans_a:  # da = B dy^T
            da = _product(ctx, b, dy, name, trans_b, True)
        else:  # da = dy B^T
            da = _product(ctx, dy, b, name, False, not trans_b)
    if want_b:
        name = ctx.name(node, parts[1])
        if b.rank == 2 and a.rank > 2:  # fold a's leading dims into its rows (a is not transposed)
            rows = math.prod(a.shape[:-1])
            a = ctx.g.reshape(a, (rows, a.shape[-1]))
            dy = ctx.g.reshape(dy, (rows, dy.shape[-1]))
        if trans_b:  # db = dy^T A
            db = _product(ctx, dy, a, name, True, trans_a)
        else:  # db = A^T dy
            db = _product(ctx, a, dy, name, not trans_a, False)
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

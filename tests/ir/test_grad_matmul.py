"""Gradient rules of the matmul family vs torch.autograd and finite differences, and composites
(DotGeneral, LoraMatMul, FusedSwiGLU) differentiated through their unfused primitives."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from grad_helpers import check_grads, rand

from rlxpy.ir import Graph, ops
from rlxpy.ir.grad.core import CHUNK_ROWS
from rlxpy.ir.passes.autodiff import grad

MATMUL_SHAPES = [((1, 1), (1, 1)), ((3, 17), (17, 5)), ((2, 3, 17), (17, 255)), ((4, 3, 5), (4, 5, 2)),
                 ((2, 2, 3, 5), (2, 2, 5, 1))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_gradients(shapes):
    a, b = rand(shapes[0], seed=1), rand(shapes[1], seed=2)
    check_grads(lambda g, x, y: g.matmul(x, y), torch.matmul, {"a": a, "b": b})


@pytest.mark.parametrize("flags", [(True, False), (False, True), (True, True)], ids=str)
@pytest.mark.parametrize("mkn,batch", [((3, 17, 5), ()), ((1, 3, 1), ()), ((3, 5, 2), (4,))], ids=str)
def test_transposed_matmul_gradients(flags, mkn, batch):
    """MatMul(transpose_a, transpose_b): a stored [.., K, M], b stored [.., N, K]."""
    m, k, n = mkn
    a = rand((*batch, k, m) if flags[0] else (*batch, m, k), seed=12)
    b = rand((*batch, n, k) if flags[1] else (*batch, k, n), seed=13)
    check_grads(lambda g, x, y: g.apply(ops.MatMul(*flags), [x, y]),
                lambda x, y: (x.mT if flags[0] else x) @ (y.mT if flags[1] else y), {"a": a, "b": b})


def test_matmul_gradients_read_transposes_in_place():
    """The rules' products take their transposes as MatMul flags: no Transpose node in the backward."""
    g = Graph("flags")
    y = g.matmul(g.input("a", (2, 3, 5)), g.param("b", (5, 4)))
    g.output(g.sum(y, (0, 1, 2), name="loss"))
    backward = grad(g, "loss", ["a", "b"]).graph
    kinds = [type(node.op).__name__ for node in backward.nodes]
    assert "Transpose" not in kinds
    flagged = {(n.op.transpose_a, n.op.transpose_b) for n in backward.nodes if isinstance(n.op, ops.MatMul)}
    assert flagged >= {(False, True), (True, False)}


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_approx", "silu", "tanh", "sigmoid"])
@pytest.mark.parametrize("shape", [(1, 3), (17, 5), (2, 3, 33)], ids=str)
def test_fused_matmul_bias_activation_gradients(shape, activation):
    x = rand(shape, seed=3)
    w = rand((shape[-1], 7), seed=4, scale=0.5)
    b = rand((7,), seed=5)
    act = {None: lambda z: z, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh,
           "gelu_approx": lambda z: F.gelu(z, approximate="tanh"), "sigmoid": torch.sigmoid}[activation]
    check_grads(lambda g, xi, wi, bi: g.linear(xi, wi, bi, activation=activation),
                lambda xi, wi, bi: act(xi @ wi + bi), {"x": x, "w": w, "b": b})


def test_dot_general_gradients_through_unfuse():
    lhs, rhs = rand((2, 3, 4), seed=6), rand((2, 4, 5), seed=7)
    check_grads(lambda g, a, b: g.dot_general(a, b, [2], [1], [0], [0]),
                lambda a, b: torch.einsum("bik,bkj->bij", a, b), {"lhs": lhs, "rhs": rhs})


def test_lora_matmul_gradients_through_unfuse():
    x, w, a, b = rand((3, 6), 8), rand((6, 4), 9), rand((6, 2), 10), rand((2, 4), 11)
    check_grads(lambda g, *t: g.lora_matmul(*t, scale=0.5),
                lambda xx, ww, aa, bb: xx @ ww + 0.5 * ((xx @ aa) @ bb), {"x": x, "w": w, "a": a, "b": b})


@pytest.mark.parametrize("gate_first", [True, False])
def test_swiglu_gradients_through_unfuse(gate_first):
    x = rand((5, 8), seed=12)

    def oracle(t):
        first, second = t[..., :4], t[..., 4:]
        gate, up = (first, second) if gate_first else (second, first)
        return up * F.silu(gate)

    check_grads(lambda g, t: g.swiglu(t, gate_first), oracle, {"x": x})



def test_a_bias_gradient_over_many_rows_sums_in_two_stages():
    """[2, 2048, 5] rows into a [5] bias: 4096 rows summed in chunks, then the chunk sums (many GPU
    workgroups rather than one per few columns); the gradients are torch's."""
    x, w, b = rand((2, 2048, 3), seed=13), rand((3, 5), seed=14), rand((5,), seed=15)
    check_grads(lambda g, xi, wi, bi: g.linear(xi, wi, bi), lambda xi, wi, bi: xi @ wi + bi,
                {"x": x, "w": w, "b": b})
    g = Graph("bias")
    y = g.linear(g.input("x", x.shape), g.param("w", w.shape), g.param("b", b.shape))
    g.output(g.sum(y, [0, 1, 2], name="loss"))
    result = grad(g, "loss", ["b"])
    sums = [n for n in result.graph.nodes if isinstance(n.op, ops.Reduce) and n.name != "loss"]
    assert sorted(tuple(result.graph[n.inputs[0]].shape) for n in sums) == [
        (4096 // CHUNK_ROWS, 5), (4096 // CHUNK_ROWS, CHUNK_ROWS, 5)]

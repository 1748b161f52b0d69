"""Gradient rules of the norm family vs torch.autograd and finite differences."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from grad_helpers import check_grads, rand

SHAPES = [(1,), (3,), (17, 5), (2, 3, 255)]


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("shape", SHAPES[1:], ids=str)
def test_softmax_gradient(shape, axis):
    x = rand(shape, seed=1, scale=2.0)
    check_grads(lambda g, a: g.softmax(a, axis), lambda a: torch.softmax(a, dim=axis), {"x": x})


def test_softmax_gradient_of_large_logits():
    x = rand((4, 9), seed=2, scale=30.0, shift=80.0)
    check_grads(lambda g, a: g.softmax(a), lambda a: torch.softmax(a, -1), {"x": x}, fd=False)


@pytest.mark.parametrize("with_beta", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm_gradients(shape, with_beta):
    x, gamma, beta = rand(shape, 3, shift=2.0), rand(shape[-1:], 4), rand(shape[-1:], 5)
    arrays = {"x": x, "gamma": gamma} | ({"beta": beta} if with_beta else {})
    tol = (2e-4, 2e-5) if shape[-1] > 1 else (1e-4, 1e-5)
    check_grads(lambda g, *t: g.layer_norm(*t, eps=1e-5),
                lambda *t: F.layer_norm(t[0], t[0].shape[-1:], *t[1:], eps=1e-5), arrays, tol=tol)


@pytest.mark.parametrize("with_beta", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm_gradients(shape, with_beta):
    x, gamma, beta = rand(shape, 6), rand(shape[-1:], 7), rand(shape[-1:], 8)
    arrays = {"x": x, "gamma": gamma} | ({"beta": beta} if with_beta else {})

    def oracle(*t):
        y = F.rms_norm(t[0], t[0].shape[-1:], t[1], eps=1e-5)
        return y + t[2] if len(t) > 2 else y

    check_grads(lambda g, *t: g.rms_norm(t[0], t[1], t[2] if len(t) > 2 else None, eps=1e-5), oracle, arrays)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_residual_norm_gradients(rms, with_bias):
    shape = (17, 33)
    arrays = {"x": rand(shape, 9), "residual": rand(shape, 10)}
    if with_bias:
        arrays["bias"] = rand((33,), 11)
    arrays |= {"gamma": rand((33,), 12), "beta": rand((33,), 13)}

    def build(g, x, residual, *rest):
        bias = rest[0] if with_bias else None
        gamma, beta = rest[-2:]
        method = g.residual_rms_norm if rms else g.residual_layer_norm
        return method(x, residual, gamma, beta, bias=bias, eps=1e-5)

    def oracle(x, residual, *rest):
        s = x + residual + (rest[0] if with_bias else 0)
        gamma, beta = rest[-2:]
        if rms:
            return F.rms_norm(s, (33,), gamma, eps=1e-5) + beta
        return F.layer_norm(s, (33,), gamma, beta, eps=1e-5)

    check_grads(build, oracle, arrays)

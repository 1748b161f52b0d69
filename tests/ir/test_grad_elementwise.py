"""Gradient rules of the element-wise family vs torch.autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from grad_helpers import check_grads, rand

SHAPES = [(1,), (3,), (17, 5), (255, 33)]

ACTIVATIONS = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "exp": torch.exp,
    "neg": torch.neg,
    "abs": torch.abs,
    "gelu": lambda x: F.gelu(x),
    "gelu_approx": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sin": torch.sin,
    "cos": torch.cos,
    "atan": torch.atan,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
}
#: activations defined for positive inputs only
POSITIVE = {"log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fn", sorted(ACTIVATIONS))
def test_activation_gradients(fn, shape):
    x = rand(shape, seed=len(shape) + 3, scale=1.5)
    check_grads(lambda g, a: g.activation(a, fn), ACTIVATIONS[fn], {"x": x})


@pytest.mark.parametrize("fn", sorted(POSITIVE))
def test_activation_gradients_on_positive_inputs(fn):
    x = np.abs(rand((17, 5), seed=2)) + 0.2
    check_grads(lambda g, a: g.activation(a, fn), POSITIVE[fn], {"x": x})


def test_tan_gradient_away_from_poles():
    x = rand((3, 7), seed=4, scale=0.5)
    check_grads(lambda g, a: g.activation(a, "tan"), torch.tan, {"x": x})


def test_round_has_zero_gradient():
    x = rand((5, 3), seed=5)
    check_grads(lambda g, a: g.add(g.activation(a, "round"), a), lambda a: torch.round(a) + a, {"x": x},
                fd=False)


def test_edge_values_match_torch_without_finite_differences():
    """Kinks and special points: relu/abs at 0 (gradient 0), gelu at 0 (1/2), large |x|."""
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 0.5, -0.5, 9.0, -9.0], np.float32)
    for fn in ("relu", "abs", "gelu", "gelu_approx", "silu", "sigmoid", "tanh"):
        check_grads(lambda g, a, fn=fn: g.activation(a, fn), ACTIVATIONS[fn], {"x": x}, fd=False)


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "max": torch.maximum, "min": torch.minimum,
}
BROADCASTS = [((17, 5), (17, 5)), ((17, 5), (5,)), ((3, 1, 4), (1, 7, 1)), ((1,), (255, 3)), ((), (3,))]


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_gradients_reduce_broadcasting(op, shapes):
    a = rand(shapes[0], seed=1)
    b = rand(shapes[1], seed=2)
    if op == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    check_grads(lambda g, x, y: g.binary(x, y, op), BINARY[op], {"a": a, "b": b})


def test_maximum_and_minimum_split_ties_like_torch():
    a = np.array([1.0, 2.0, 3.0, -1.0], np.float32)
    b = np.array([1.0, 5.0, 3.0, -2.0], np.float32)
    for op in ("max", "min"):
        check_grads(lambda g, x, y, op=op: g.binary(x, y, op), BINARY[op], {"a": a, "b": b}, fd=False)


def test_pow_gradients_including_zero_base_and_zero_exponent():
    a = np.abs(rand((4, 6), seed=3)) + 0.3
    b = rand((4, 6), seed=4)
    check_grads(lambda g, x, y: g.pow(x, y), torch.pow, {"a": a, "b": b})
    a0 = np.array([0.0, 0.0, 2.0, 1.5], np.float32)
    b0 = np.array([2.0, 0.0, 0.0, 3.0], np.float32)
    check_grads(lambda g, x, y: g.pow(x, y), torch.pow, {"a": a0, "b": b0}, fd=False)


def test_pow_by_a_constant_exponent():
    a = rand((17, 5), seed=6)
    check_grads(lambda g, x: g.pow(x, 2.0), lambda x: x ** 2, {"a": a})


def test_where_gradients_skip_the_condition():
    c = rand((17, 5), seed=7) > 0
    a, b = rand((17, 5), seed=8), rand((5,), seed=9)
    check_grads(lambda g, m, x, y: g.where(m, x, y), lambda m, x, y: torch.where(m.bool(), x, y),
                {"cond": c, "a": a, "b": b})


def test_cast_and_copy_pass_the_gradient():
    x = rand((3, 4), seed=10)
    # widen then narrow back: exact both ways, so finite differences stay meaningful
    check_grads(lambda g, a: g.mul(g.copy(g.cast(g.cast(a, "f64"), a.dtype)), a), lambda a: a * a, {"x": x})


def test_fan_out_gradients_are_summed():
    x = rand((17, 5), seed=11)
    check_grads(lambda g, a: g.add(g.mul(g.tanh(a), a), g.exp(g.mul(a, 0.3))),
                lambda a: torch.tanh(a) * a + torch.exp(a * 0.3), {"x": x})

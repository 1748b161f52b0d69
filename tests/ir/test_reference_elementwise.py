"""The numpy reference of the elementwise family against torch: activations, binary ops,
compares, where and casts, on odd shapes and NaN/inf edge values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reference_helpers import EDGES, run, t
from reference_helpers import close_tight as close
from reference_helpers import rand_edges as rand

from rlxpy.ir import DType
from rlxpy.ir.ops import ActKind, BinaryOp, CmpOp

ODD_SHAPES = [(1,), (3,), (17, 5), (255, 33), (2, 3, 257)]


# -- activations ---------------------------------------------------------------------------------
def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


TORCH_ACTIVATIONS = {
    ActKind.RELU: torch.relu, ActKind.SIGMOID: torch.sigmoid, ActKind.TANH: torch.tanh,
    ActKind.EXP: torch.exp, ActKind.LOG: torch.log, ActKind.SQRT: torch.sqrt, ActKind.RSQRT: torch.rsqrt,
    ActKind.NEG: torch.neg,
    ActKind.ABS: torch.abs, ActKind.GELU: F.gelu, ActKind.SILU: F.silu,
    ActKind.GELU_APPROX: lambda x: F.gelu(x, approximate="tanh"), ActKind.ROUND: _round_half_away,
    ActKind.SIN: torch.sin, ActKind.COS: torch.cos, ActKind.TAN: torch.tan, ActKind.ATAN: torch.atan,
    ActKind.HARDSIGMOID: F.hardsigmoid, ActKind.HARDSWISH: F.hardswish,
}


def test_every_activation_has_an_oracle():
    assert set(TORCH_ACTIVATIONS) == set(ActKind)


@pytest.mark.parametrize("shape", ODD_SHAPES[:4])
@pytest.mark.parametrize("fn", list(ActKind), ids=lambda k: k.name)
def test_activation_matches_torch(fn, shape):
    x = rand(shape, seed=int(fn))
    out = run(lambda g, a: g.activation(a, fn), x=x)
    assert out.dtype == np.float32
    # the oracle runs in f64 on the same f32 inputs; the reference rounds its f64 result to f32
    close(out, TORCH_ACTIVATIONS[fn](t(x).double()).float(), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("fn", [ActKind.GELU, ActKind.SILU, ActKind.SIGMOID, ActKind.TANH])
def test_activation_in_f16_matches_torch_f16(fn):
    x = rand((255,), seed=3).astype(np.float16)
    out = run(lambda g, a: g.activation(a, fn), x=x)
    assert out.dtype == np.float16
    close(out, TORCH_ACTIVATIONS[fn](t(x).float()).half(), rtol=1e-3, atol=1e-3)


def test_round_is_half_away_from_zero_unlike_torch_round():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.49, -3.51, 0.0], dtype=np.float32)
    out = run(lambda g, a: g.activation(a, "round"), x=x)
    np.testing.assert_array_equal(out, [1, 2, 3, -1, -3, 3, -4, 0])
    # torch.round is half-to-even: it differs exactly on the .5 cases with an even floor
    assert torch.round(t(x)).tolist() == [0, 2, 2, -0, -2, 3, -4, 0]


def test_gelu_exact_and_approx_differ():
    x = np.linspace(-4, 4, 17, dtype=np.float32)
    exact = run(lambda g, a: g.gelu(a), x=x)
    approx = run(lambda g, a: g.gelu(a, approximate=True), x=x)
    assert 1e-5 < np.abs(exact - approx).max() < 1e-2


# -- binary ----------------------------------------------------------------------------------------
TORCH_BINARY = {
    BinaryOp.ADD: torch.add, BinaryOp.SUB: torch.sub, BinaryOp.MUL: torch.mul, BinaryOp.DIV: torch.div,
    BinaryOp.MAX: torch.maximum, BinaryOp.MIN: torch.minimum, BinaryOp.POW: torch.pow,
}


BROADCAST_PAIRS = [((17, 5), (5,)), ((3, 1, 4), (1, 5, 1)), ((255,), (1,)), ((1,), (1,)),
                   ((2, 3, 257), (3, 1))]


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("op", list(BinaryOp), ids=lambda k: k.name)
def test_binary_matches_torch_with_broadcasting(op, shapes):
    a = rand(shapes[0], seed=1)
    b = rand(shapes[1], seed=2, edges=False)
    if op is BinaryOp.POW:  # small integral and fractional exponents keep values finite
        b = np.round(b) / np.where(np.arange(b.size).reshape(b.shape) % 2, 1, 2).astype(np.float32)
    out = run(lambda g, x, y: g.binary(x, y, op), a=a, b=b)
    close(out, TORCH_BINARY[op](t(a).double(), t(b).double()).float(), rtol=2e-6)


def test_pow_negative_base_is_real_for_integral_exponents_nan_otherwise():
    a = np.array([-2.0, -2.0, -8.0, -3.0, 0.0, 0.0, -0.5, 2.0], dtype=np.float32)
    b = np.array([3.0, 2.0, 1 / 3, -1.0, 0.0, -1.0, 0.5, 0.5], dtype=np.float32)
    out = run(lambda g, x, y: g.pow(x, y), a=a, b=b)
    close(out, torch.pow(t(a), t(b)))
    assert out[0] == -8 and out[1] == 4 and np.isnan(out[2]) and out[4] == 1 and out[5] == np.inf


@pytest.mark.parametrize("exponent", [0.5, -0.5, 2.0, -1.0, 1 / 3])
def test_pow_by_a_broadcast_scalar_follows_ieee_pow(exponent):
    # The answer must not depend on broadcasting. numpy (and torch with a Python-number exponent)
    # turn x ** 0.5 into sqrt(x) and x ** -0.5 into rsqrt(x): (-inf) ** 0.5 = NaN, (-0) ** 0.5 = -0.
    # The IR follows IEEE pow (C's pow, math.pow), which torch.pow gives for a tensor exponent.
    a = np.array([-np.inf, np.inf, -0.0, 0.0, -2.0, 4.0, np.nan], dtype=np.float32)
    out = run(lambda g, x: g.pow(x, exponent), x=a)
    expected = torch.pow(t(a).double(), torch.full(a.shape, exponent, dtype=torch.float64)).float()
    close(out, expected, rtol=2e-6)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(expected.numpy()))  # signed zeros too
    scalar = run(lambda g, x, y: g.pow(x, y), x=np.array(-np.inf, np.float32), y=np.array(0.5, np.float32))
    assert scalar.shape == () and scalar == np.inf


def test_binary_scalar_operand_is_a_constant_of_the_same_dtype():
    a = rand((17, 5), seed=4, edges=False)
    close(run(lambda g, x: g.mul(x, 0.5), a=a), t(a) * 0.5)
    close(run(lambda g, x: g.sub(x, 2), a=a), t(a) - 2)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_integer_division_truncates_like_torch_trunc_mode(dtype):
    rng = np.random.default_rng(5)
    a = rng.integers(-100, 100, (17, 5)).astype(dtype)
    b = rng.integers(1, 9, (17, 5)).astype(dtype) * np.where(rng.random((17, 5)) < 0.5, -1, 1).astype(dtype)
    out = run(lambda g, x, y: g.div(x, y), a=a, b=b)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, torch.div(t(a), t(b), rounding_mode="trunc").numpy())


def test_integer_division_is_exact_for_large_i64():
    a = np.array([2**62 + 1, -(2**62) - 3, 2**53 + 1], dtype=np.int64)
    b = np.array([3, 7, -1], dtype=np.int64)
    out = run(lambda g, x, y: g.div(x, y), a=a, b=b)
    np.testing.assert_array_equal(out, torch.div(t(a), t(b), rounding_mode="trunc").numpy())


@pytest.mark.parametrize("op", [op for op in BinaryOp if op is not BinaryOp.DIV], ids=lambda k: k.name)
def test_integer_binary_matches_torch(op):
    rng = np.random.default_rng(6)
    a = rng.integers(-9, 9, (3, 17)).astype(np.int32)
    b = rng.integers(0, 4, (17,)).astype(np.int32)
    out = run(lambda g, x, y: g.binary(x, y, op), a=a, b=b)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, TORCH_BINARY[op](t(a), t(b)).numpy())


@pytest.mark.parametrize("a_dtype,b_dtype,expected", [(np.int32, np.float32, np.float32),
                                                      (np.bool_, np.float32, np.float32),
                                                      (np.float16, np.float32, np.float32),
                                                      (np.int8, np.int32, np.int32)])
def test_binary_promotes_mixed_dtypes(a_dtype, b_dtype, expected):
    a = np.arange(-3, 14).reshape(17, 1).astype(a_dtype)
    b = (np.arange(5) + 1).astype(b_dtype)
    out = run(lambda g, x, y: g.add(x, y), a=a, b=b)
    assert out.dtype == expected
    np.testing.assert_array_equal(out, (t(a) + t(b)).numpy().astype(expected))


# -- compare and where -------------------------------------------------------------------------------
TORCH_COMPARE = {CmpOp.EQ: torch.eq, CmpOp.NE: torch.ne, CmpOp.LT: torch.lt, CmpOp.LE: torch.le,
                 CmpOp.GT: torch.gt, CmpOp.GE: torch.ge}


@pytest.mark.parametrize("op", list(CmpOp), ids=lambda k: k.name)
def test_compare_matches_torch_with_nan_and_broadcast(op):
    a = np.repeat(EDGES[None, :], 3, axis=0)  # [3, 14]
    b = np.array([[np.nan], [0.5], [np.inf]], dtype=np.float32)  # [3, 1]
    out = run(lambda g, x, y: g.compare(x, y, op), a=a, b=b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, TORCH_COMPARE[op](t(a), t(b)).numpy())
    # NaN is unequal to everything, itself included: only NE is true on the NaN row
    assert out[0].all() if op is CmpOp.NE else not out[0].any()


def test_compare_with_python_scalar():
    a = rand((17, 5), seed=7)
    np.testing.assert_array_equal(run(lambda g, x: g.compare(x, 0.0, "ge"), a=a), (t(a) >= 0).numpy())


@pytest.mark.parametrize("cond_dtype", [np.bool_, np.float32])
def test_where_broadcasts_like_torch(cond_dtype):
    cond = (np.random.default_rng(8).random((3, 1, 5)) < 0.5).astype(cond_dtype)
    a = rand((17, 5), seed=9)
    b = rand((3, 17, 1), seed=10)
    out = run(lambda g, c, x, y: g.where(c, x, y), c=cond, a=a, b=b)
    np.testing.assert_array_equal(out, torch.where(t(cond) != 0, t(a), t(b)).numpy())


def test_where_promotes_branches():
    cond = np.array([True, False, True])
    out = run(lambda g, c, x, y: g.where(c, x, y), c=cond, a=np.array([1, 2, 3], np.int32),
              b=np.array([0.5, 1.5, 2.5], np.float32))
    assert out.dtype == np.float32 and out.tolist() == [1.0, 1.5, 3.0]


# -- cast ----------------------------------------------------------------------------------------------
INT_TARGETS = {"i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
               "u8": torch.uint8}


@pytest.mark.parametrize("target", list(INT_TARGETS))
def test_cast_float_to_int_truncates_toward_zero_like_torch(target):
    info = np.iinfo(DType.parse(target).numpy)
    rng = np.random.default_rng(11)
    x = rng.uniform(max(info.min, -1e6), min(info.max, 1e6), 255).astype(np.float32)
    x[:6] = [0.99, -0.99, 2.5, -2.5, 0.0, -0.0]
    if info.min == 0:
        x = np.abs(x)
    out = run(lambda g, a: g.cast(a, target), x=x)
    np.testing.assert_array_equal(out, t(x).to(INT_TARGETS[target]).numpy())


@pytest.mark.parametrize("target", ["i8", "i16", "i32", "i64", "u8", "u32"])
def test_cast_float_to_int_saturates_and_maps_nan_to_zero(target):
    # torch leaves out-of-range and NaN conversions undefined (C++ UB); the IR saturates, NaN -> 0
    info = np.iinfo(DType.parse(target).numpy)
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3.9, -3.9], dtype=np.float32)
    out = run(lambda g, a: g.cast(a, target), x=x)
    expected = [0, info.max, info.min, info.max, info.min, 3, max(-3, info.min)]
    assert out.dtype == info.dtype and out.tolist() == expected


def test_cast_f64_to_i64_saturates_near_the_limit():
    x = np.array([2.0**63, -(2.0**63), 2.0**63 - 1024, -(2.0**63) - 4096], dtype=np.float64)
    out = run(lambda g, a: g.cast(a, "i64"), x=x)
    assert out.tolist() == [2**63 - 1, -(2**63), 2**63 - 1024, -(2**63)]


def test_cast_to_bf16_rounds_like_torch():
    x = rand((255, 33), seed=12, scale=1e3)
    ties = np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x00018000], np.uint32)  # ties, max, subnormal
    x.reshape(-1)[20:24] = ties.view(np.float32)
    out = run(lambda g, a: g.cast(a, "bf16"), x=x)
    assert out.dtype == np.float32  # the reference computes bf16 as f32 values on the bf16 grid
    np.testing.assert_array_equal(out, t(x).to(torch.bfloat16).float().numpy())


def test_cast_to_f16_and_back_matches_torch():
    x = rand((17, 5), seed=13, scale=1e4)
    out = run(lambda g, a: g.cast(g.cast(a, "f16"), "f32"), x=x)
    np.testing.assert_array_equal(out, t(x).half().float().numpy())


def test_cast_to_bool_and_from_bool_and_int_to_float():
    x = np.array([0.0, -0.0, 2.0, np.nan, -np.inf], dtype=np.float32)
    np.testing.assert_array_equal(run(lambda g, a: g.cast(a, "bool"), x=x), t(x).bool().numpy())
    flags = np.array([True, False, True])
    np.testing.assert_array_equal(run(lambda g, a: g.cast(a, "f32"), x=flags), [1.0, 0.0, 1.0])
    ints = np.array([-7, 0, 2**24 + 1], dtype=np.int32)
    np.testing.assert_array_equal(run(lambda g, a: g.cast(a, "f32"), x=ints), t(ints).float().numpy())


def test_cast_int_to_narrower_int_wraps_like_torch():
    x = np.array([300, -129, 255, 65537], dtype=np.int32)
    np.testing.assert_array_equal(run(lambda g, a: g.cast(a, "u8"), x=x), t(x).to(torch.uint8).numpy())
    np.testing.assert_array_equal(run(lambda g, a: g.cast(a, "i8"), x=x), t(x).to(torch.int8).numpy())


def test_copy_is_a_fresh_equal_array():
    x = rand((17, 5), seed=21)
    np.testing.assert_array_equal(run(lambda g, a: g.copy(a), x=x), x)

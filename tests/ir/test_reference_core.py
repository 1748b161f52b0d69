"""The numpy reference (rlxpy.ir.reference.core) against torch: element-wise ops, casts, data
movement, reductions, scans and selection, on odd shapes and NaN/inf edge values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlxpy.ir import DType, Graph
from rlxpy.ir.ops import ActKind, BinaryOp, CmpOp, ReduceOp
from rlxpy.ir.reference import run_reference

ODD_SHAPES = [(1,), (3,), (17, 5), (255, 33), (2, 3, 257)]
EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e-30, 88.0, -88.0],
                 dtype=np.float32)


def run(build, **arrays: np.ndarray) -> np.ndarray:
    """One Input per keyword array, ``build(g, *inputs)`` -> node, evaluated by the reference."""
    g = Graph("t")
    nodes = [g.input(name, a.shape, DType.parse(a.dtype)) for name, a in arrays.items()]
    out = build(g, *nodes)
    g.output(out)
    return run_reference(g, arrays)[out.name]


def rand(shape, seed: int = 0, scale: float = 3.0, edges: bool = True) -> np.ndarray:
    """Normal values; with ``edges`` the first elements are NaN, +-inf, +-0, halves, tiny, large."""
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    if edges:
        flat = x.reshape(-1)
        count = min(flat.size, EDGES.size)
        flat[:count] = EDGES[:count]
    return x


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def close(actual: np.ndarray, expected, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    expected = expected.numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != oracle {expected.shape}"
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True)


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


# -- views and data movement -------------------------------------------------------------------------
@pytest.mark.parametrize("shape,new_shape", [((255, 33), (-1, 11)), ((2, 3, 257), (6, -1)), ((1,), (-1,)),
                                             ((17, 5), (5, 1, -1)), ((3,), (1, 3, 1))])
def test_reshape_matches_torch(shape, new_shape):
    x = rand(shape, seed=14)
    out = run(lambda g, a: g.reshape(a, new_shape), x=x)
    np.testing.assert_array_equal(out, t(x).reshape(new_shape).numpy())


@pytest.mark.parametrize("shape,perm", [((17, 5), (1, 0)), ((2, 3, 257), (2, 0, 1)),
                                        ((1, 3, 17, 5), (0, 2, 1, 3)), ((3,), (0,))])
def test_transpose_matches_torch_permute(shape, perm):
    x = rand(shape, seed=15)
    np.testing.assert_array_equal(run(lambda g, a: g.transpose(a, perm), x=x), t(x).permute(perm).numpy())


@pytest.mark.parametrize("shape,axis,start,length", [((255, 33), 0, 17, 100), ((255, 33), 1, 32, 1),
                                                     ((2, 3, 257), -1, 0, 255), ((3,), 0, 1, 2),
                                                     ((17, 5), 1, 5, 0)])
def test_narrow_matches_torch(shape, axis, start, length):
    x = rand(shape, seed=16)
    out = run(lambda g, a: g.narrow(a, axis, start, length), x=x)
    np.testing.assert_array_equal(out, t(x).narrow(axis, start, length).numpy())


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_matches_torch_cat(axis):
    shapes = {0: [(1, 3, 5), (17, 3, 5), (3, 3, 5)], 1: [(2, 1, 5), (2, 17, 5)], -1: [(2, 3, 1), (2, 3, 255)]}
    arrays = {f"x{i}": rand(s, seed=17 + i) for i, s in enumerate(shapes[axis])}
    out = run(lambda g, *xs: g.concat(xs, axis), **arrays)
    np.testing.assert_array_equal(out, torch.cat([t(a) for a in arrays.values()], axis).numpy())


@pytest.mark.parametrize("shape,target", [((1,), (255,)), ((17, 1), (3, 17, 5)), ((5,), (2, 3, 5)),
                                          ((3, 1), (3, 17))])
def test_expand_matches_torch(shape, target):
    x = rand(shape, seed=20)
    out = run(lambda g, a: g.expand(a, target), x=x)
    np.testing.assert_array_equal(out, t(x).expand(target).numpy())


def test_copy_is_a_fresh_equal_array():
    x = rand((17, 5), seed=21)
    np.testing.assert_array_equal(run(lambda g, a: g.copy(a), x=x), x)


def _torch_gather(table: torch.Tensor, idx: np.ndarray, axis: int) -> torch.Tensor:
    """Clamp into [0, dim-1] (truncating fractions), index_select, reshape like numpy.take."""
    dim = table.shape[axis]
    clamped = torch.from_numpy(np.trunc(idx.astype(np.float64))).long().clamp(0, dim - 1)
    picked = torch.index_select(table, axis, clamped.reshape(-1))
    return picked.reshape(table.shape[:axis] + tuple(idx.shape) + table.shape[axis + 1:])


@pytest.mark.parametrize("axis,table_shape,idx_shape", [(0, (255, 33), (17,)), (0, (3, 5), (2, 4)),
                                                        (1, (3, 17, 5), (6,)), (2, (2, 3, 257), (3, 1)),
                                                        (-1, (17, 5), (1,))])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64, np.float32])
def test_gather_matches_torch_index_select_with_clamping(axis, table_shape, idx_shape, idx_dtype):
    table = rand(table_shape, seed=22)
    dim = table_shape[axis]
    rng = np.random.default_rng(23)
    idx = rng.integers(-3, dim + 3, idx_shape).astype(idx_dtype)  # out-of-range both sides: clamped
    if idx_dtype is np.float32:
        idx = idx + np.float32(0.75) * np.sign(idx)  # fractions truncate toward zero
    out = run(lambda g, a, i: g.gather(a, i, axis), table=table, idx=idx)
    np.testing.assert_array_equal(out, _torch_gather(t(table), idx, axis % len(table_shape)).numpy())


@pytest.mark.parametrize("updates_shape,out_dim", [((17, 5), 3), ((255,), 17), ((1, 3, 2), 1), ((33, 4), 40)])
def test_scatter_add_matches_torch_index_add(updates_shape, out_dim):
    updates = rand(updates_shape, seed=24, edges=False)
    rng = np.random.default_rng(25)
    idx = rng.integers(-2, out_dim + 2, updates_shape[0]).astype(np.int32)  # rows outside are skipped
    out = run(lambda g, u, i: g.scatter_add(u, i, out_dim), updates=updates, idx=idx)
    keep = (idx >= 0) & (idx < out_dim)
    expected = torch.zeros((out_dim,) + updates_shape[1:], dtype=torch.float64)
    expected.index_add_(0, t(idx[keep]).long(), t(updates[keep]).double())
    close(out, expected.float())


# -- reductions ------------------------------------------------------------------------------------------
def _torch_reduce(x: torch.Tensor, op: ReduceOp, axes: tuple[int, ...], keep_dim: bool) -> torch.Tensor:
    axes = tuple(sorted(a % x.ndim for a in axes))
    if op is ReduceOp.PROD:  # torch.prod takes one dim: merge the contiguous axes first
        merged = x.reshape(x.shape[:axes[0]] + (-1,) + x.shape[axes[-1] + 1:])
        out = merged.prod(axes[0], keepdim=keep_dim)
        if keep_dim:
            out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return out
    fn = {ReduceOp.SUM: torch.sum, ReduceOp.MEAN: torch.mean, ReduceOp.MAX: torch.amax,
          ReduceOp.MIN: torch.amin}
    return fn[op](x, dim=axes, keepdim=keep_dim)


@pytest.mark.parametrize("keep_dim", [False, True])
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (-1,), (0, 1), (1, 2), (-2, -1), (0, 1, 2)], ids=str)
@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda k: k.name)
def test_reduce_matches_torch(op, axes, keep_dim):
    x = rand((3, 17, 5), seed=26, scale=1.0, edges=False)
    if op is ReduceOp.PROD:
        x = np.float32(1.0) + x * np.float32(0.05)  # keep the product in range
    out = run(lambda g, a: g.reduce(a, op, axes, keep_dim), x=x)
    close(out, _torch_reduce(t(x).double(), op, axes, keep_dim).float(), rtol=2e-6)


@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda k: k.name)
def test_reduce_propagates_nan_like_torch(op):
    x = rand((17, 5), seed=27, edges=False)
    x[3, 2] = np.nan
    x[5, 0] = np.inf
    out = run(lambda g, a: g.reduce(a, op, -1), x=x)
    close(out, _torch_reduce(t(x).double(), op, (-1,), False).float(), rtol=2e-6)
    assert np.isnan(out[3]) and not np.isnan(out[0])


def test_reduce_over_255_elements_and_integer_sum():
    x = rand((255,), seed=28, edges=False)
    close(run(lambda g, a: g.sum(a, 0), x=x), t(x).double().sum().float(), rtol=2e-6)
    ints = np.arange(-8, 9, dtype=np.int32).reshape(17, 1)
    np.testing.assert_array_equal(run(lambda g, a: g.sum(a, (0, 1), keep_dim=True), x=ints), [[0]])


# -- softmax, cumsum ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("shape", [(3, 17, 5), (1, 1, 255), (2, 3, 257)], ids=str)
def test_softmax_matches_torch_on_any_axis(shape, axis):
    x = rand(shape, seed=29, scale=10.0, edges=False)
    close(run(lambda g, a: g.softmax(a, axis), x=x), torch.softmax(t(x).double(), axis).float())


def test_softmax_rows_with_inf_and_nan_like_torch():
    ninf, inf, nan = -np.inf, np.inf, np.nan
    x = np.array([[ninf, ninf, ninf, ninf],  # fully masked row: NaN, as torch
                  [ninf, 0.0, 1.0, ninf],  # partly masked: zeros where -inf
                  [1.0, inf, 2.0, 0.0],  # +inf: NaN (inf - inf), as torch
                  [1.0, nan, 2.0, 0.0],  # NaN propagates to the whole row
                  [1e4, -1e4, 0.0, 1e4]], dtype=np.float32)  # large values: max-subtracted, no overflow
    out = run(lambda g, a: g.softmax(a), x=x)
    close(out, torch.softmax(t(x), -1))
    assert np.isnan(out[0]).all() and out[1, 0] == 0 and np.isnan(out[2]).all() and np.isnan(out[3]).all()
    np.testing.assert_allclose(out[4], [0.5, 0, 0, 0.5])


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (255, 33)], ids=str)
def test_cumsum_inclusive_matches_torch(shape, axis):
    x = rand(shape, seed=30, edges=False)
    close(run(lambda g, a: g.cumsum(a, axis), x=x), torch.cumsum(t(x).double(), axis).float(), atol=1e-5)


def _torch_exclusive_cumsum(x: torch.Tensor, axis: int) -> torch.Tensor:
    """y[0] = 0, y[i] = sum_{j<i} x[j]: pad one zero in front, drop the last element."""
    zeros = torch.zeros_like(x.narrow(axis, 0, 1))
    return torch.cumsum(torch.cat([zeros, x.narrow(axis, 0, x.shape[axis] - 1)], axis), axis)


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (255, 33)], ids=str)
def test_cumsum_exclusive_matches_shifted_torch_cumsum(shape, axis):
    x = rand(shape, seed=31, edges=False)
    out = run(lambda g, a: g.cumsum(a, axis, exclusive=True), x=x)
    close(out, _torch_exclusive_cumsum(t(x).double(), axis).float(), atol=1e-5)


def test_cumsum_exclusive_is_not_poisoned_by_inf_or_nan_at_its_own_position():
    x = np.array([[1.0, np.inf, 2.0], [np.nan, 1.0, 2.0], [1e30, 1.0, -1e30]], dtype=np.float32)
    out = run(lambda g, a: g.cumsum(a, exclusive=True), x=x)
    close(out, _torch_exclusive_cumsum(t(x).double(), -1).float())
    assert out[0, 1] == 1 and out[1, 0] == 0 and out[2, 1] == np.float32(1e30)


def test_cumsum_on_integers():
    x = np.arange(-8, 9, dtype=np.int32).reshape(1, 17)
    np.testing.assert_array_equal(run(lambda g, a: g.cumsum(a), x=x), torch.cumsum(t(x), -1).numpy())


# -- topk, argmax --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,k", [((1,), 1), ((3, 17), 5), ((255, 33), 33), ((2, 3, 257), 3)], ids=str)
def test_topk_breaks_ties_toward_the_smaller_index(shape, k):
    # few distinct values, so ties are everywhere; the oracle is a stable descending argsort
    x = np.random.default_rng(32).integers(-3, 3, shape).astype(np.float32)
    out = run(lambda g, a: g.topk(a, k), x=x)
    assert out.dtype == np.int32
    expected = torch.argsort(-t(x), dim=-1, stable=True)[..., :k]
    np.testing.assert_array_equal(out, expected.numpy())
    # and the picked values are torch.topk's values
    np.testing.assert_array_equal(np.take_along_axis(x, out, -1), torch.topk(t(x), k).values.numpy())


def test_topk_ranks_nan_above_inf_like_torch():
    x = np.array([[1.0, np.inf, np.nan, -np.inf, np.nan, 2.0],
                  [np.inf, 0.0, np.nan, 3.0, -1.0, np.inf]], dtype=np.float32)
    out = run(lambda g, a: g.topk(a, 6), x=x)
    assert out.tolist() == [[2, 4, 1, 5, 0, 3], [2, 0, 5, 3, 1, 4]]
    values = np.take_along_axis(x, out, -1)
    torch.testing.assert_close(t(values), torch.topk(t(x), 6).values, equal_nan=True)


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=str)
def test_argmax_matches_torch(shape):
    x = np.random.default_rng(33).integers(-5, 5, shape).astype(np.float32)  # ties -> first index
    out = run(lambda g, a: g.argmax(a), x=x)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, torch.argmax(t(x), -1).numpy())


def test_argmax_picks_the_first_nan_like_torch():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [np.inf, 1.0, np.nan, np.inf], [2.0, 5.0, 5.0, -np.inf],
                  [-np.inf, -np.inf, -np.inf, -np.inf]], dtype=np.float32)
    out = run(lambda g, a: g.argmax(a), x=x)
    assert out.tolist() == [1, 2, 1, 0]
    np.testing.assert_array_equal(out, torch.argmax(t(x), -1).numpy())

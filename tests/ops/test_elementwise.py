"""Element-wise kernels (elementwise_unary, elementwise_binary, elementwise_compare, elementwise_where,
elementwise_cast) against torch: all 17 activations with NaN/inf, the 7 binary ops over f32/i32/mixed
dtypes with explicit broadcasting, pow and division edge cases, compares with NaN, where, and casts
between f32, i32, u32 and bool."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ODD_SHAPES, TOL, assert_close, check_op, rand

import rlxpy
from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp
from rlxpy.ir.reference import run_reference

F = torch.nn.functional
INF, NAN = np.inf, np.nan


def round_half_away(t: torch.Tensor) -> torch.Tensor:
    """sign(x) * floor(|x| + 0.5), computed in float64 (C's round(); torch.round is half-to-even)."""
    wide = t.double()
    return (torch.sign(wide) * torch.floor(wide.abs() + 0.5)).float()


#: torch oracle, random-input range and tolerance of each activation.
ACTIVATIONS = {
    ActKind.RELU: (torch.relu, (-4, 4), "exact"),
    ActKind.SIGMOID: (torch.sigmoid, (-12, 12), "transcendental"),
    ActKind.TANH: (torch.tanh, (-6, 6), "transcendental"),
    ActKind.EXP: (torch.exp, (-20, 20), "transcendental"),
    ActKind.LOG: (torch.log, (-1, 10), "transcendental"),  # negatives give NaN on both sides
    ActKind.SQRT: (torch.sqrt, (-1, 10), "elementwise"),
    ActKind.RSQRT: (torch.rsqrt, (-1, 10), "elementwise"),
    ActKind.NEG: (torch.neg, (-4, 4), "exact"),
    ActKind.ABS: (torch.abs, (-4, 4), "exact"),
    ActKind.GELU: (F.gelu, (-6, 6), "transcendental"),
    ActKind.SILU: (F.silu, (-12, 12), "transcendental"),
    ActKind.GELU_APPROX: (lambda t: F.gelu(t, approximate="tanh"), (-6, 6), "transcendental"),
    ActKind.ROUND: (round_half_away, (-6, 6), "exact"),
    ActKind.SIN: (torch.sin, (-3, 3), "transcendental"),
    ActKind.COS: (torch.cos, (-3, 3), "transcendental"),
    ActKind.TAN: (torch.tan, (-1.5, 1.5), "transcendental"),
    ActKind.ATAN: (torch.atan, (-8, 8), "transcendental"),
    ActKind.HARDSIGMOID: (F.hardsigmoid, (-5, 5), "elementwise"),
    ActKind.HARDSWISH: (F.hardswish, (-5, 5), "elementwise"),
}

#: NaN, infinities, signed zeros, tiny and huge values, and the halfway points Round gets wrong
#: with a float32 "floor(|x| + 0.5)" (0.49999997 + 0.5 rounds up; 2^23 + 1 + 0.5 rounds to 2^23 + 2).
EDGES = np.array([NAN, INF, -INF, 0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997,
                  -0.49999997, 8388609.0, -8388609.0, 20.0, -20.0, 88.0, -88.0, 100.0, -100.0], np.float32)


def test_every_activation_kind_has_an_oracle():
    assert set(ACTIVATIONS) == set(ActKind)


@pytest.mark.parametrize("shape", ODD_SHAPES, ids=str)
@pytest.mark.parametrize("kind", list(ActKind), ids=lambda k: k.name)
def test_activation_matches_torch(device, kind, shape):
    oracle, (low, high), tol = ACTIVATIONS[kind]
    x = rand(shape, seed=int(kind), low=low, high=high)
    check_op(lambda g, a: g.activation(a, kind), [x], oracle, tol=tol)


#: Edge oracles that do not depend on the torch build: GELU's +inf is NaN in some (x * Phi(x) is inf).
EDGE_ORACLES = {ActKind.GELU: lambda t: t * torch.special.ndtr(t)}
#: sin/cos/tan reduce their argument like Cephes' sinf: accurate for |x| < 8192, not for 2^23 + 1.
TRIG = (ActKind.SIN, ActKind.COS, ActKind.TAN)


@pytest.mark.parametrize("kind", list(ActKind), ids=lambda k: k.name)
def test_activation_of_nan_inf_and_edges_matches_torch(device, kind):
    oracle, _, tol = ACTIVATIONS[kind]
    oracle = EDGE_ORACLES.get(kind, oracle)
    edges = EDGES[~(np.abs(EDGES) > 8192)] if kind in TRIG else EDGES
    gpu = check_op(lambda g, a: g.activation(a, kind, name="act"), [edges], oracle, tol=tol)["act"]
    want = oracle(torch.from_numpy(edges)).numpy()
    np.testing.assert_array_equal(np.isnan(gpu), np.isnan(want), err_msg=f"{kind.name}: NaN positions")
    np.testing.assert_array_equal(np.isposinf(gpu), np.isposinf(want), err_msg=f"{kind.name}: +inf positions")
    np.testing.assert_array_equal(np.isneginf(gpu), np.isneginf(want), err_msg=f"{kind.name}: -inf positions")


def test_trig_stays_accurate_far_from_zero(device):
    # GPU built-ins are only accurate on [-pi, pi]; the kernels reduce the argument themselves
    x = np.linspace(-8000, 8000, 4001, dtype=np.float32)
    out = check_op(lambda g, a: (g.activation(a, "sin"), g.activation(a, "cos")), [x],
                   lambda a: (torch.sin(a.double()).float(), torch.cos(a.double()).float()), tol=(0, 2e-7))
    assert len(out) == 2


def test_round_is_half_away_from_zero_not_half_to_even(device):
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 8388609.0, 2.4999998], np.float32)
    gpu = check_op(lambda g, a: g.activation(a, "round", name="r"), [x], round_half_away, tol="exact")["r"]
    np.testing.assert_array_equal(gpu, [1, 2, 3, -1, -3, 0, 8388609, 2])


def test_activation_of_an_integer_tensor_is_a_graph_error():
    g = rlxpy.Graph("bad")
    with pytest.raises(GraphError, match=r"act \(Activation\).*needs a float input"):
        g.activation(g.input("x", (3,), DType.I32), "relu", name="act")


def test_activation_of_f16_is_a_clear_error(device):
    g = rlxpy.Graph("bad")
    g.output(g.activation(g.input("x", (3,), DType.F16), "exp", name="act"))
    with pytest.raises(UnsupportedOpError, match=r"act \(Activation\).*f32 only"):
        rlxpy.compile(g)


# -- binary -------------------------------------------------------------------------------------
def trunc_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Integer division toward zero; x / 0 = x (the reference's rule)."""
    safe = torch.where(b == 0, torch.ones_like(b), b)
    return torch.where(b == 0, a, torch.div(a, safe, rounding_mode="trunc"))


FLOAT_ORACLES = {
    BinaryOp.ADD: torch.add, BinaryOp.SUB: torch.sub, BinaryOp.MUL: torch.mul, BinaryOp.DIV: torch.div,
    BinaryOp.MAX: torch.maximum, BinaryOp.MIN: torch.minimum, BinaryOp.POW: torch.pow,
}
INT_ORACLES = {**FLOAT_ORACLES, BinaryOp.DIV: trunc_div}
BROADCASTS = [((17, 5), (17, 5)), ((3, 1), (1, 4)), ((255, 33), (33,)), ((2, 3, 257), ()), ((1,), (3,))]


def float_operands(op: BinaryOp, a_shape, b_shape, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if op is BinaryOp.POW:  # positive bases here; negative ones in the edge-grid test below
        return rand(a_shape, seed, low=0.1, high=3.0), rand(b_shape, seed + 1, low=-3.0, high=3.0)
    a, b = rand(a_shape, seed), rand(b_shape, seed + 1)
    if op is BinaryOp.DIV:
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    return a, b


@pytest.mark.parametrize("a_shape,b_shape", BROADCASTS, ids=str)
@pytest.mark.parametrize("op", list(BinaryOp), ids=lambda o: o.name)
def test_binary_f32_with_broadcasting_matches_torch(device, op, a_shape, b_shape):
    a, b = float_operands(op, a_shape, b_shape, seed=int(op))
    tol = "transcendental" if op is BinaryOp.POW else "elementwise"
    check_op(lambda g, x, y: g.binary(x, y, op), [a, b], FLOAT_ORACLES[op], tol=tol)


@pytest.mark.parametrize("a_shape,b_shape", BROADCASTS[:3], ids=str)
@pytest.mark.parametrize("op", list(BinaryOp), ids=lambda o: o.name)
def test_binary_i32_matches_torch(device, op, a_shape, b_shape):
    rng = np.random.default_rng(int(op))
    a = rng.integers(-40, 40, a_shape).astype(np.int32)
    b = rng.integers(-9, 9, b_shape).astype(np.int32)  # includes 0: x / 0 = x
    if op is BinaryOp.POW:
        a, b = rng.integers(-6, 6, a_shape).astype(np.int32), rng.integers(0, 7, b_shape).astype(np.int32)
    check_op(lambda g, x, y: g.binary(x, y, op), [a, b], INT_ORACLES[op], tol="exact")


def test_i32_negative_powers_truncate_and_overflow_wraps(device):
    a = np.array([2, -2, 1, -1, -1, 7], np.int32)
    b = np.array([-1, -1, -5, -3, -4, -2], np.int32)
    powers = check_op(lambda g, x, y: g.pow(x, y, name="p"), [a, b], tol="exact")["p"]
    np.testing.assert_array_equal(powers, [0, 0, 1, -1, 1, 0])  # trunc of the real power, like the reference
    big = np.array([2147483647, -2147483647, 65536, -3, 3], np.int32)
    step = np.array([1, -2, 2, 3, 21], np.int32)
    exponent = np.abs(step)  # products wrap modulo 2^32 in numpy, torch and WGSL alike
    check_op(lambda g, x, y, e: (g.add(x, y), g.mul(x, y), g.pow(x, e)), [big, step, exponent],
             lambda x, y, e: (x + y, x * y, torch.pow(x, e)), tol="exact")


MIXED = [(DType.F32, DType.I32), (DType.I32, DType.F32), (DType.I32, DType.BOOL), (DType.BOOL, DType.F32),
         (DType.U32, DType.BOOL)]


@pytest.mark.parametrize("a_dtype,b_dtype", MIXED, ids=str)
@pytest.mark.parametrize("op", [BinaryOp.ADD, BinaryOp.MUL, BinaryOp.MAX, BinaryOp.MIN], ids=lambda o: o.name)
def test_binary_of_mixed_dtypes_promotes_like_torch(device, op, a_dtype, b_dtype):
    def operand(dtype: DType, shape: tuple[int, ...], seed: int) -> np.ndarray:
        if dtype is DType.F32:
            return rand(shape, seed) * 10
        top = 2 if dtype is DType.BOOL else 50
        return np.random.default_rng(seed).integers(0, top, shape).astype(dtype.numpy)

    a, b = operand(a_dtype, (17, 5), 1), operand(b_dtype, (5,), 2)

    def widen(t: torch.Tensor) -> torch.Tensor:  # torch has few uint32 kernels: compute in int64
        return t.to(torch.int64) if t.dtype == torch.uint32 else t

    gpu = check_op(lambda g, x, y: g.binary(x, y, op, name="out"), [a, b], dtypes=[a_dtype, b_dtype])["out"]
    want = FLOAT_ORACLES[op](widen(torch.from_numpy(a)), widen(torch.from_numpy(b))).numpy()
    assert_close(gpu, want.astype(gpu.dtype), *TOL["elementwise"], what=f"{a_dtype} {op.name} {b_dtype}")


def test_bool_sums_are_stored_as_one(device):
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    gpu = check_op(lambda g, x, y: g.cast(g.add(x, y), "f32", name="f"), [a, b])["f"]
    np.testing.assert_array_equal(gpu, [1.0, 1.0, 1.0, 0.0])  # True + True is True (1), not 2


def test_pow_edge_grid_matches_torch_pow(device):
    bases = np.array([-INF, -3.0, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, INF, NAN], np.float32)
    exponents = np.array([-INF, -3.0, -2.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 2.5, INF, NAN], np.float32)
    x = np.repeat(bases, exponents.size).reshape(bases.size, exponents.size)
    y = np.tile(exponents, (bases.size, 1))
    gpu = check_op(lambda g, a, b: g.pow(a, b, name="p"), [x, y], torch.pow, tol="transcendental")["p"]
    want = torch.pow(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    numbers = ~np.isnan(want)  # a NaN's sign bit means nothing
    np.testing.assert_array_equal(np.signbit(gpu[numbers]), np.signbit(want[numbers]),
                                  err_msg="signs of zeros and infinities")


def test_division_by_zero_matches_torch(device):
    a = np.array([1.0, -1.0, 0.0, NAN, INF, -INF, 3.0], np.float32)
    b = np.array([0.0, 0.0, 0.0, 0.0, 0.0, -0.0, -0.0], np.float32)
    check_op(lambda g, x, y: g.div(x, y), [a, b], torch.div, tol="exact")
    ia, ib = np.array([7, -7, 0, 5, -9], np.int32), np.array([0, 0, 0, -2, 2], np.int32)
    check_op(lambda g, x, y: g.div(x, y), [ia, ib], trunc_div, tol="exact")


def test_maximum_and_minimum_propagate_nan_like_torch(device):
    a = np.array([NAN, 1.0, NAN, -INF, 0.0], np.float32)
    b = np.array([1.0, NAN, NAN, INF, -0.0], np.float32)
    check_op(lambda g, x, y: (g.maximum(x, y), g.minimum(x, y)), [a, b],
             lambda x, y: (torch.maximum(x, y), torch.minimum(x, y)), tol="exact")


def test_binary_that_promotes_to_i64_is_a_clear_error(device):
    g = rlxpy.Graph("bad")
    g.output(g.add(g.input("a", (3,), DType.I32), g.input("b", (3,), DType.U32), name="mix"))
    with pytest.raises(UnsupportedOpError, match=r"mix \(Binary\).*i64"):
        rlxpy.compile(g)


def test_binary_of_mismatched_shapes_is_a_graph_error():
    g = rlxpy.Graph("bad")
    with pytest.raises(GraphError, match=r"plus \(Binary\)"):
        g.add(g.input("a", (3, 2)), g.input("b", (4,)), name="plus")


# -- compare, where -----------------------------------------------------------------------------
CMP_ORACLES = {CmpOp.EQ: torch.eq, CmpOp.NE: torch.ne, CmpOp.LT: torch.lt, CmpOp.LE: torch.le,
               CmpOp.GT: torch.gt, CmpOp.GE: torch.ge}
CMP_NUMPY = {CmpOp.EQ: np.equal, CmpOp.NE: np.not_equal, CmpOp.LT: np.less, CmpOp.LE: np.less_equal,
             CmpOp.GT: np.greater, CmpOp.GE: np.greater_equal}


@pytest.mark.parametrize("op", list(CmpOp), ids=lambda o: o.name)
def test_compare_with_nan_and_inf_matches_torch(device, op):
    values = np.array([NAN, -INF, -1.0, -0.0, 0.0, 1.0, INF], np.float32)
    x, y = np.repeat(values, values.size), np.tile(values, values.size)
    gpu = check_op(lambda g, a, b: g.compare(a, b, op, name="c"), [x, y], CMP_ORACLES[op], tol="exact")["c"]
    assert gpu.dtype == bool
    assert gpu[0] == (op is CmpOp.NE), "NaN compares false except for !="


@pytest.mark.parametrize("op", list(CmpOp), ids=lambda o: o.name)
def test_compare_broadcast_ints_and_mixed_float_int(device, op):
    rng = np.random.default_rng(int(op))
    a, b = rng.integers(-3, 3, (17, 5)).astype(np.int32), rng.integers(-3, 3, (5,)).astype(np.int32)
    check_op(lambda g, x, y: g.compare(x, y, op), [a, b], CMP_ORACLES[op], tol="exact")
    halves = (rng.integers(-6, 6, (3, 1)) / 2).astype(np.float32)  # halves vs ints: 1.5 < 2 must hold
    whole = rng.integers(-3, 3, (1, 4)).astype(np.int32)
    check_op(lambda g, x, y: g.compare(x, y, op), [halves, whole], CMP_ORACLES[op], tol="exact")


@pytest.mark.parametrize("op", list(CmpOp), ids=lambda o: o.name)
def test_compare_i32_with_u32_orders_like_int64(device, op):
    a = np.array([-1, -2147483648, 5, 7, 2147483647, 0], np.int32)
    b = np.array([4294967295, 0, 5, 3, 2147483648, 4294967295], np.uint32)
    gpu = check_op(lambda g, x, y: (g.compare(x, y, op, name="ab"), g.compare(y, x, op, name="ba")), [a, b],
                   dtypes=[DType.I32, DType.U32])
    np.testing.assert_array_equal(gpu["ab"], CMP_NUMPY[op](a.astype(np.int64), b.astype(np.int64)))
    np.testing.assert_array_equal(gpu["ba"], CMP_NUMPY[op](b.astype(np.int64), a.astype(np.int64)))


@pytest.mark.parametrize("cond_dtype", [DType.BOOL, DType.F32, DType.I32], ids=str)
def test_where_with_broadcasting_matches_torch(device, cond_dtype):
    rng = np.random.default_rng(5)
    cond = rng.integers(0, 2, (17, 1)).astype(cond_dtype.numpy)
    if cond_dtype is DType.F32:
        cond[:3, 0] = [NAN, -0.0, 0.5]  # NaN counts as true, -0.0 as false
    on_true, on_false = rand((17, 5), 1), rand((5,), 2)
    on_false[0] = NAN
    check_op(lambda g, c, a, b: g.where(c, a, b), [cond, on_true, on_false],
             lambda c, a, b: torch.where(c != 0, a, b), tol="exact",
             dtypes=[cond_dtype, DType.F32, DType.F32])


def test_where_of_mixed_int_and_float_branches_promotes_to_f32(device):
    cond = np.array([True, False, True, False])
    ints, floats = np.array([1, 2, 3, 4], np.int32), np.array([0.5, -0.5, 1.5, NAN], np.float32)
    gpu = check_op(lambda g, c, a, b: g.where(c, a, b, name="w"), [cond, ints, floats],
                   lambda c, a, b: torch.where(c, a, b), tol="exact")["w"]
    assert gpu.dtype == np.float32


# -- casts between word dtypes -------------------------------------------------------------------
def float_to_int(t: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Truncate toward zero, saturate, NaN -> 0 (the IR rule; torch's own cast is undefined there)."""
    wide = torch.nan_to_num(t.double(), nan=0.0, posinf=high, neginf=low)
    return torch.clamp(torch.trunc(wide), low, high)


CAST_VALUES = np.array([0.0, -0.0, 0.4, -0.6, 1.5, -2.5, 1e10, -1e10, 2147483520.0, INF, -INF, NAN, 3e9,
                        4.5e9], np.float32)


@pytest.mark.parametrize("shape", ODD_SHAPES[:4], ids=str)
def test_cast_f32_to_ints_truncates_saturates_and_maps_nan_to_zero(device, shape):
    numel = int(np.prod(shape))
    x = np.concatenate([CAST_VALUES, rand((numel,), 1) * 100])[:numel].reshape(shape)
    gpu = check_op(lambda g, a: (g.cast(a, "i32", name="i"), g.cast(a, "u32", name="u"),
                                 g.cast(a, "bool", name="b")), [x], tol="exact")
    t = torch.from_numpy(x)
    np.testing.assert_array_equal(gpu["i"], float_to_int(t, -2**31, 2**31 - 1).numpy().astype(np.int32))
    np.testing.assert_array_equal(gpu["u"], float_to_int(t, 0, 2**32 - 1).numpy().astype(np.uint32))
    np.testing.assert_array_equal(gpu["b"], t.to(torch.bool).numpy())  # NaN is true, -0.0 false


def test_cast_between_ints_bools_and_floats(device):
    ints = np.array([0, 1, -1, 16777217, -2147483648, 2147483647, 7], np.int32)
    flags = np.array([True, False, True, True, False, False, True])
    gpu = check_op(lambda g, i, b: (g.cast(i, "f32", name="i2f"), g.cast(i, "bool", name="i2b"),
                                    g.cast(b, "f32", name="b2f"), g.cast(b, "i32", name="b2i"),
                                    g.cast(i, "u32", name="i2u"),
                                    g.cast(g.cast(i, "u32"), "i32", name="u2i")),
                   [ints, flags], tol="exact")
    ti, tb = torch.from_numpy(ints), torch.from_numpy(flags)
    np.testing.assert_array_equal(gpu["i2f"], ti.float().numpy())
    np.testing.assert_array_equal(gpu["i2b"], ti.bool().numpy())
    np.testing.assert_array_equal(gpu["b2f"], tb.float().numpy())
    np.testing.assert_array_equal(gpu["b2i"], tb.int().numpy())
    np.testing.assert_array_equal(gpu["i2u"], ints.view(np.uint32))  # two's complement, like numpy
    np.testing.assert_array_equal(gpu["u2i"], ints)


def test_elementwise_steps_are_one_dispatch_each(device):
    g = rlxpy.Graph("steps")
    x, y = g.input("x", (17, 5)), g.input("y", (17, 5))
    out = g.where(g.compare(x, y, "lt"), g.exp(x), g.cast(g.cast(y, "i32"), "f32"))
    g.output(out)
    exe = rlxpy.compile(g)
    kernels = [s.kernel for s in exe.schedule.steps]
    assert kernels == ["elementwise_compare", "elementwise_unary", "elementwise_cast", "elementwise_cast",
                       "elementwise_where"]
    feeds = {"x": rand((17, 5), 1), "y": rand((17, 5), 2)}
    assert_close(exe.run(feeds)[out.name], run_reference(g, feeds)[out.name], *TOL["transcendental"])


@pytest.mark.parametrize("kind", list(ActKind), ids=lambda k: k.name)
def test_activation_of_a_multiple_of_4_elements_takes_16_byte_accesses(device, kind):
    """24 and 4,352 elements at aligned offsets run elementwise_unary_vec4; edges and NaN included."""
    oracle, (low, high), tol = ACTIVATIONS[kind]
    oracle = EDGE_ORACLES.get(kind, oracle)
    edges = EDGES[~(np.abs(EDGES) > 8192)] if kind in TRIG else EDGES
    edges = np.resize(edges, 24)
    for x in (edges, rand((64, 68), seed=int(kind), low=low, high=high)):
        check_op(lambda g, a: g.activation(a, kind), [x], oracle, tol=tol)
    g = rlxpy.Graph("vec4")
    g.output(g.activation(g.input("x", [64, 68]), kind))
    assert [s.kernel for s in rlxpy.compile(g).schedule.steps] == ["elementwise_unary_vec4"]


@pytest.mark.parametrize("op", list(BinaryOp), ids=lambda o: o.name)
def test_binary_of_a_multiple_of_4_elements_takes_16_byte_accesses(device, op):
    a, b = float_operands(op, (64, 68), (64, 68), seed=int(op))
    a[0, :4], b[1, :4] = [NAN, INF, -INF, 0.0], [NAN, 0.0, INF, -INF]
    tol = "transcendental" if op is BinaryOp.POW else "elementwise"
    check_op(lambda g, x, y: g.binary(x, y, op), [a, b], FLOAT_ORACLES[op], tol=tol)
    g = rlxpy.Graph("vec4")
    g.output(g.binary(g.input("a", [64, 68]), g.input("b", [64, 68]), op))
    assert [s.kernel for s in rlxpy.compile(g).schedule.steps] == ["elementwise_binary_vec4"]


def test_casts_of_a_multiple_of_4_elements_take_16_byte_accesses(device):
    x = np.concatenate([CAST_VALUES, rand((82,), 1) * 100]).reshape(12, 8)
    ints = np.resize(np.array([0, 1, -1, 16777217, -2147483648, 2147483647, 7], np.int32), 8)
    gpu = check_op(lambda g, a, i: (g.cast(a, "i32", name="i"), g.cast(a, "u32", name="u"),
                                    g.cast(a, "bool", name="b"), g.cast(i, "f32", name="i2f"),
                                    g.cast(i, "u32", name="i2u")), [x, ints], tol="exact")
    t = torch.from_numpy(x)
    np.testing.assert_array_equal(gpu["i"], float_to_int(t, -2**31, 2**31 - 1).numpy().astype(np.int32))
    np.testing.assert_array_equal(gpu["u"], float_to_int(t, 0, 2**32 - 1).numpy().astype(np.uint32))
    np.testing.assert_array_equal(gpu["b"], t.to(torch.bool).numpy())
    np.testing.assert_array_equal(gpu["i2f"], torch.from_numpy(ints).float().numpy())
    np.testing.assert_array_equal(gpu["i2u"], ints.view(np.uint32))
    g = rlxpy.Graph("vec4")
    g.output(g.cast(g.input("x", [12, 8]), "i32"))
    assert [s.kernel for s in rlxpy.compile(g).schedule.steps] == ["elementwise_cast_vec4"]

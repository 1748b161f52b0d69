"""ElementwiseRegion and BatchElementwiseRegion vs the same math written with torch ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlxpy.errors import GraphError
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Graph
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp
from rlxpy.ir.ops.region import ChainKind, ChainStep, ElementwiseRegion, chain_input, chain_step, encode_chain
from rlxpy.ir.reference import run_reference

IN = chain_input
S = chain_step


def _rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _close(actual, expected, tol=1e-6):
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol, equal_nan=True)


# silu(x) * y + scalar, then + bias[C] read with a modulus
SWISH_BIAS = (
    ChainStep.activation(ActKind.SILU, IN(0)),
    ChainStep.binary(BinaryOp.MUL, S(0), IN(1)),
    ChainStep.binary(BinaryOp.ADD, S(1), IN(2)),
    ChainStep.binary(BinaryOp.ADD, S(2), IN(3)),
)


@pytest.mark.parametrize("shape", [(1,), (3,), (17, 5), (255, 33), (2, 3, 257)])
def test_region_matches_torch_with_scalar_and_modulus_inputs(shape):
    x, y = _rand(shape, 1), _rand(shape, 2)
    x.reshape(-1)[::11] = np.nan
    y.reshape(-1)[::13] = np.inf
    scalar, bias = np.array([0.25], np.float32), _rand(shape[-1:], 3)
    g = Graph()
    ins = [g.input("x", shape), g.input("y", shape), g.input("s", (1,)), g.input("bias", bias.shape)]
    out = g.elementwise_region(ins, SWISH_BIAS, scalar_input_mask=0b100, input_modulus=(0, 0, 0, shape[-1]))
    g.output(out)
    got = run_reference(g, {"x": x, "y": y, "s": scalar, "bias": bias})[out.name]
    tx = torch.from_numpy(x).double()
    want = F.silu(tx) * torch.from_numpy(y).double() + 0.25 + torch.from_numpy(bias).double()
    _close(got, want.float(), 1e-6)


def test_region_equals_the_unfused_ops_exactly():
    shape = (17, 5)
    x, y = _rand(shape, 4), _rand(shape, 5) * 3
    chain = (
        ChainStep.activation(ActKind.GELU, IN(0)),
        ChainStep.activation(ActKind.ROUND, IN(1)),
        ChainStep.compare(CmpOp.GT, S(0), S(1)),
        ChainStep.cast(DType.I32, IN(1)),
        ChainStep.where(S(2), S(0), S(3)),
        ChainStep.binary(BinaryOp.POW, S(4), IN(0)),
    )
    g = Graph()
    xin, yin = g.input("x", shape), g.input("y", shape)
    region = g.elementwise_region([xin, yin], chain)
    gelu, rounded = g.gelu(xin), g.activation(yin, "round")
    chosen = g.where(g.compare(gelu, rounded, "gt"), gelu, g.cast(yin, "i32"))
    unfused = g.pow(chosen, xin)
    g.output(region, unfused)
    out = run_reference(g, {"x": x, "y": y})
    assert region.dtype is DType.F32 and unfused.dtype is DType.F32
    np.testing.assert_array_equal(out[region.name], out[unfused.name])


def test_region_activation_and_cast_semantics_match_torch():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3e9, -3e9, np.nan, 7.9, -7.9], np.float32)
    chain = (
        ChainStep.activation(ActKind.ROUND, IN(0)),  # half away from zero (not torch.round's even)
        ChainStep.cast(DType.I32, IN(0)),  # truncate, saturate, NaN -> 0
        ChainStep.activation(ActKind.GELU, IN(0)),  # exact erf GELU
        ChainStep.cast(DType.F32, S(1)),
        ChainStep.binary(BinaryOp.ADD, S(0), S(3)),
        ChainStep.binary(BinaryOp.ADD, S(4), S(2)),
    )
    g = Graph()
    out = g.elementwise_region([g.input("x", x.shape)], chain)
    g.output(out)
    got = run_reference(g, {"x": x})[out.name]
    t = torch.from_numpy(x).double()
    rounded = torch.sign(t) * torch.floor(t.abs() + 0.5)
    info = torch.iinfo(torch.int32)
    truncated = torch.nan_to_num(torch.trunc(t), nan=0.0).clamp(info.min, info.max).to(torch.int32).double()
    want = rounded + truncated + F.gelu(t, approximate="none")
    _close(got, want.float(), 1e-6)


def test_region_compare_output_is_bool():
    g = Graph()
    x = g.input("x", (4,))
    out = g.elementwise_region([x, g.input("t", (1,))], (ChainStep.compare(CmpOp.LE, IN(0), IN(1)),),
                               scalar_input_mask=0b10)
    g.output(out)
    assert out.dtype is DType.BOOL
    got = run_reference(g, {"x": np.array([0, 1, 2, np.nan], np.float32), "t": np.array([1.0], np.float32)})
    np.testing.assert_array_equal(got[out.name], [True, True, False, False])


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 4, 6), (1, 2, 17, 5)])
def test_resize_prologue_matches_torch_nearest_upsampling(shape):
    n, c, h, w = shape
    small, skip = _rand(shape, 6), _rand((n, c, 2 * h, 2 * w), 7)
    chain = (ChainStep.binary(BinaryOp.ADD, IN(0), IN(1)), ChainStep.activation(ActKind.RELU, S(0)))
    g = Graph()
    ins = [g.input("skip", skip.shape), g.input("small", shape)]
    out = g.elementwise_region(ins, chain, shape=skip.shape, prologue="resize_nearest_2x", prologue_input=1)
    g.output(out)
    got = run_reference(g, {"small": small, "skip": skip})[out.name]
    up = F.interpolate(torch.from_numpy(small), scale_factor=2, mode="nearest")
    _close(got, torch.relu(torch.from_numpy(skip) + up))


def test_batch_region_applies_the_chain_per_slice():
    slices = [_rand((3, 5), s) for s in range(4)]
    chain = (
        ChainStep.activation(ActKind.TANH, IN(0)),
        ChainStep.binary(BinaryOp.MUL, S(0), IN(3)),  # every Input(k) reads the current slice
        ChainStep.binary(BinaryOp.MAX, S(1), IN(0)),
    )
    g = Graph()
    out = g.batch_elementwise_region([g.input(f"s{i}", (3, 5)) for i in range(4)], chain)
    g.output(out)
    assert out.shape == (12, 5)
    got = run_reference(g, {f"s{i}": s for i, s in enumerate(slices)})[out.name]
    want = torch.cat([torch.maximum(torch.tanh(t) * t, t) for t in map(torch.from_numpy, slices)])
    _close(got, want)


def test_batch_region_with_modulus_and_prologue():
    slices = [_rand((5,), s) for s in range(3)]
    chain = (ChainStep.activation(ActKind.NEG, IN(0)),)
    g = Graph()
    out = g.batch_elementwise_region([g.input(f"s{i}", (5,)) for i in range(3)], chain, shape=(3, 10),
                                     input_modulus=(5,))
    small = [_rand((1, 2, 2, 3), s) for s in range(2)]
    up = g.batch_elementwise_region([g.input(f"m{i}", (1, 2, 2, 3)) for i in range(2)], chain,
                                    shape=(2, 2, 4, 6), prologue="resize_nearest_2x")
    g.output(out, up)
    feed = {f"s{i}": s for i, s in enumerate(slices)} | {f"m{i}": m for i, m in enumerate(small)}
    got = run_reference(g, feed)
    _close(got[out.name], -np.stack([np.tile(s, 2) for s in slices]))
    want_up = torch.cat([-F.interpolate(torch.from_numpy(m), scale_factor=2, mode="nearest") for m in small])
    _close(got[up.name], want_up)


def test_chain_encoding_matches_the_catalogue_words():
    chain = (
        ChainStep.activation(ActKind.GELU, IN(0)),
        ChainStep.cast(DType.I32, S(0)),
        ChainStep.binary(BinaryOp.DIV, S(1), IN(2)),
        ChainStep.compare(CmpOp.GE, S(2), IN(1)),
        ChainStep.where(S(3), IN(0), S(2)),
    )
    step = 1 << 31
    assert encode_chain(chain) == (
        0, 0, 0, 0,  # region activation ids: Gelu 0 (ActKind.GELU is 9)
        1, 6, step | 0, 0,  # Cast to I32: dtype id 6
        2, 3, step | 1, 2,
        3, 5, step | 2, 1,
        4, step | 3, 0, step | 2,  # Where: sub = cond operand
    )
    assert str(chain[4]) == "where(s3, in0, s2)"


def test_region_rebuilds_chain_steps_from_plain_tuples():
    """A JSON round trip hands back tuples; the op turns them back into ChainSteps."""
    plain = ((ChainKind.ACTIVATION, ActKind.EXP, ((False, 0),)),)
    op = ElementwiseRegion(plain, (3,))  # type: ignore[arg-type]
    assert op.chain == (ChainStep.activation(ActKind.EXP, IN(0)),)
    assert hash(op) == hash(ElementwiseRegion((ChainStep.activation(ActKind.EXP, IN(0)),), (3,)))


def test_region_errors_name_the_problem():
    g = Graph()
    x = g.input("x", (4, 3))
    relu = (ChainStep.activation(ActKind.RELU, IN(0)),)
    with pytest.raises(GraphError, match=r"r \(ElementwiseRegion\): a chain has 1..32 steps, got 33"):
        g.elementwise_region([x], relu * 33, name="r")
    with pytest.raises(GraphError, match="chain step 0 reads s0, which is not an earlier step"):
        g.elementwise_region([x], (ChainStep.activation(ActKind.RELU, S(0)),))
    with pytest.raises(GraphError, match="chain step 0 reads in1, which is not an input"):
        g.elementwise_region([x], (ChainStep.binary(BinaryOp.ADD, IN(0), IN(1)),))
    with pytest.raises(GraphError, match=r"chain step 0 \(activation exp\(in0\)\): activation EXP needs"):
        g.elementwise_region([g.input("i", (4,), "i32")], (ChainStep.activation(ActKind.EXP, IN(0)),))
    with pytest.raises(GraphError, match="takes 2 operands, got 1"):
        g.elementwise_region([x], (ChainStep(ChainKind.BINARY, BinaryOp.ADD, (IN(0),)),))
    with pytest.raises(GraphError, match="bad sub"):
        g.elementwise_region([x], (ChainStep(ChainKind.WHERE, ActKind.EXP, (IN(0), IN(0), IN(0))),))
    with pytest.raises(GraphError, match=r"takes 1..16 inputs, got 17"):
        g.elementwise_region([x] * 17, relu)
    with pytest.raises(GraphError, match="input 1 is marked scalar but is f32"):
        g.elementwise_region([x, x], relu, scalar_input_mask=0b10)
    with pytest.raises(GraphError, match="must hold input_modulus=4 elements"):
        g.elementwise_region([x, g.input("b", (3,))], relu, input_modulus=(0, 4))
    with pytest.raises(GraphError, match="must have the output's 12 elements"):
        g.elementwise_region([x, g.input("c", (5,))], relu)
    with pytest.raises(GraphError, match=r"prologue input 0 must be \[1, 2, 2, 3\]"):
        g.elementwise_region([g.input("p", (1, 2, 4, 6))], relu, (1, 2, 4, 6), prologue="resize_nearest_2x")
    with pytest.raises(GraphError, match=r"needs a static NCHW output with even H, W, got \[1, 2, 3, 6\]"):
        g.elementwise_region([g.input("o", (1, 2, 1, 3))], relu, (1, 2, 3, 6), prologue="resize_nearest_2x")
    with pytest.raises(GraphError, match="names inputs beyond"):
        g.elementwise_region([x], relu, scalar_input_mask=0b10)


def test_batch_region_errors():
    g = Graph()
    a, b = g.input("a", (3,)), g.input("b", (4,))
    relu = (ChainStep.activation(ActKind.RELU, IN(0)),)
    with pytest.raises(GraphError, match=r"br \(BatchElementwiseRegion\): slices must share one shape"):
        g.batch_elementwise_region([a, b], relu, name="br")
    with pytest.raises(GraphError, match=r"output \[7\] does not split into 2 equal slices"):
        g.batch_elementwise_region([a, a], relu, shape=(7,))

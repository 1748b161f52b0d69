"""Fused element-wise regions on the GPU (region_chain) against the numpy reference and the same math
written independently with torch: scalar / modulus / 2x-resize prologue inputs, every step kind,
integer and bool chains, NaN / inf, batch regions; chains the word kernels cannot express fall back
to host steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close

import rlxpy
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import ActKind, BinaryOp, CmpOp
from rlxpy.ir.ops.region import ChainStep, chain_input, chain_step
from rlxpy.ir.reference import run_reference

IN, S = chain_input, chain_step
TRANSCENDENTAL = (2e-6, 2e-6)


def rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def run_region(inputs: dict[str, np.ndarray], build):
    """(GPU result, reference result, step kinds) of the region ``build(g, nodes)`` returns."""
    g = rlxpy.Graph("region")
    nodes = [g.input(name, a.shape, DType.parse(a.dtype)) for name, a in inputs.items()]
    out = build(g, nodes)
    g.output(out)
    exe = rlxpy.compile(g)
    kinds = [s.kind for s in exe.schedule.steps]
    return exe.run(inputs)[out.name], run_reference(g, inputs)[out.name], kinds


@pytest.mark.parametrize("shape", [(1,), (3,), (17, 5), (255, 33), (2, 3, 257)])
def test_swish_bias_chain_with_scalar_and_modulus_inputs(device, shape):
    """silu(x) * y + scalar + bias[last axis] with NaN and inf: one dispatch, as torch."""
    x, y = rand(shape, 1), rand(shape, 2)
    x.reshape(-1)[::11] = np.nan
    y.reshape(-1)[::13] = np.inf
    bias = rand(shape[-1:], 3)
    chain = (ChainStep.activation(ActKind.SILU, IN(0)), ChainStep.binary(BinaryOp.MUL, S(0), IN(1)),
             ChainStep.binary(BinaryOp.ADD, S(1), IN(2)), ChainStep.binary(BinaryOp.ADD, S(2), IN(3)))
    feeds = {"x": x, "y": y, "s": np.array([0.25], np.float32), "bias": bias}
    got, ref, kinds = run_region(feeds, lambda g, n: g.elementwise_region(
        n, chain, scalar_input_mask=0b100, input_modulus=(0, 0, 0, shape[-1])))
    assert kinds == ["gpu"]
    tx, ty, tb = (torch.from_numpy(a).double() for a in (x, y, bias))
    want = F.silu(tx) * ty + 0.25 + tb
    assert_close(ref, want.float().numpy(), *TRANSCENDENTAL, "reference vs torch")
    assert_close(got, want.float().numpy(), *TRANSCENDENTAL, "GPU vs torch")


def test_every_step_kind_with_edge_values(device):
    """gelu / tanh / round / atan, pow and div with NaN, inf, 0 and negative bases, a NaN-aware
    compare, where on an f32 condition (NaN and -0 as torch.where(c != 0)), saturating casts."""
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -2.5, 3.0, 1e10, -7.25, 2.0, -1.0],
                        np.float32)
    x = np.concatenate([specials, rand(52, 4, 3.0)])
    y = np.concatenate([specials[::-1], rand(52, 5, 2.0)])
    chain = (ChainStep.activation(ActKind.GELU, IN(0)),          # s0
             ChainStep.binary(BinaryOp.POW, IN(0), IN(1)),       # s1
             ChainStep.binary(BinaryOp.DIV, S(1), IN(1)),        # s2
             ChainStep.compare(CmpOp.LT, IN(0), IN(1)),          # s3 (bool)
             ChainStep.where(S(3), S(0), S(2)),                  # s4
             ChainStep.activation(ActKind.ROUND, S(4)),          # s5
             ChainStep.where(IN(0), S(5), IN(1)),                # s6
             ChainStep.cast(DType.I32, S(6)),                    # s7 (saturating, NaN -> 0)
             ChainStep.binary(BinaryOp.MAX, S(7), S(3)),         # s8 (i32 max with a bool)
             ChainStep.cast(DType.F32, S(8)),                    # s9
             ChainStep.binary(BinaryOp.ADD, S(9), S(6)),         # s10
             ChainStep.activation(ActKind.ATAN, S(10)))          # s11
    got, ref, kinds = run_region({"x": x, "y": y}, lambda g, n: g.elementwise_region(n, chain))
    assert kinds == ["gpu"]
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    s0, s1 = F.gelu(tx.double()).float(), torch.pow(tx, ty)
    s2, s3 = s1 / ty, tx < ty
    s4 = torch.where(s3, s0, s2)
    s5 = (torch.sign(s4.double()) * torch.floor(s4.double().abs() + 0.5)).float()
    s6 = torch.where(tx != 0, s5, ty)
    s7 = torch.where(torch.isnan(s6), 0.0, s6.double().clamp(-2**31, 2**31 - 1)).to(torch.int32)
    s9 = torch.maximum(s7, s3.to(torch.int32)).float()
    want = torch.atan((s9 + s6).double()).float().numpy()
    assert_close(ref, want, 1e-6, 1e-6, "reference vs torch")
    assert_close(got, ref, 1e-6, 1e-6, "GPU vs reference")


def test_integer_and_bool_chain(device):
    """i32 trunc division (x / 0 = x), integer pow, bool or, u32 input cast: exact."""
    r = np.random.default_rng(6)
    a = r.integers(-50, 50, 300).astype(np.int32)
    b = r.integers(-4, 5, 300).astype(np.int32)
    u = r.integers(0, 1 << 31, 300).astype(np.uint32)
    chain = (ChainStep.binary(BinaryOp.DIV, IN(0), IN(1)),        # s0 i32
             ChainStep.binary(BinaryOp.POW, IN(1), IN(1)),        # s1 i32 (negative exponents truncate)
             ChainStep.compare(CmpOp.GT, S(0), S(1)),             # s2 bool
             ChainStep.compare(CmpOp.EQ, IN(1), IN(1)),           # s3 bool
             ChainStep.binary(BinaryOp.ADD, S(2), S(3)),          # s4 bool (or)
             ChainStep.cast(DType.I32, IN(2)),                    # s5 u32 -> i32 (wraps like numpy)
             ChainStep.where(S(4), S(0), S(5)))                   # s6 i32
    got, ref, kinds = run_region({"a": a, "b": b, "u": u}, lambda g, n: g.elementwise_region(n, chain))
    assert kinds == ["gpu"]
    ta, tb = torch.from_numpy(a).long(), torch.from_numpy(b).long()
    s0 = torch.where(tb == 0, ta, torch.div(ta, torch.where(tb == 0, 1, tb), rounding_mode="trunc"))
    s1 = torch.tensor([int(float(p) ** float(p)) if p < 0 else int(p) ** int(p) for p in b.tolist()])
    s4 = (s0 > s1) | (tb == tb)
    want = torch.where(s4, s0, torch.from_numpy(u.astype(np.int64)).to(torch.int32).long()).to(torch.int32)
    np.testing.assert_array_equal(ref, want.numpy())
    np.testing.assert_array_equal(got, ref)


def test_resize_prologue_reads_the_half_resolution_pixel(device):
    """relu(upsample2x(low) + skip) on NCHW, like torch's nearest interpolate."""
    low, skip = rand((2, 3, 5, 4), 7), rand((2, 3, 10, 8), 8)
    chain = (ChainStep.binary(BinaryOp.ADD, IN(0), IN(1)), ChainStep.activation(ActKind.RELU, S(0)))
    got, ref, kinds = run_region({"low": low, "skip": skip}, lambda g, n: g.elementwise_region(
        n, chain, shape=(2, 3, 10, 8), prologue="resize_nearest_2x", prologue_input=0))
    assert kinds == ["gpu"]
    up = F.interpolate(torch.from_numpy(low), scale_factor=2, mode="nearest")
    want = torch.relu(up + torch.from_numpy(skip))
    assert_close(ref, want.numpy(), 0, 0, "reference vs torch")
    assert_close(got, want.numpy(), 0, 0, "GPU vs torch")


def test_batch_region_runs_the_chain_per_slice(device):
    """tanh(x) * x + x on each of 4 slices (every Input(k) reads the slice); one dispatch per slice."""
    slices = [rand((6, 3), 10 + i) for i in range(4)]
    chain = (ChainStep.activation(ActKind.TANH, IN(0)), ChainStep.binary(BinaryOp.MUL, S(0), IN(1)),
             ChainStep.binary(BinaryOp.ADD, S(1), IN(2)))
    feeds = {f"x{i}": s for i, s in enumerate(slices)}
    got, ref, kinds = run_region(feeds, lambda g, n: g.batch_elementwise_region(n, chain, shape=(4, 18)))
    assert kinds == ["gpu"] * 4
    want = np.stack([((torch.tanh(t.double()) * t.double()).float() + t).numpy().reshape(-1)
                     for t in map(torch.from_numpy, slices)])
    assert_close(ref, want, *TRANSCENDENTAL, "reference vs torch")
    assert_close(got, want, *TRANSCENDENTAL, "GPU vs torch")


def test_chains_outside_the_word_kernels_run_on_the_host(device):
    """An f16 input and an i32 / u32 compare: host steps, same values as the reference."""
    h = rand(10, 12).astype(np.float16)
    chain = (ChainStep.cast(DType.F32, IN(0)), ChainStep.activation(ActKind.EXP, S(0)))
    got, ref, kinds = run_region({"h": h}, lambda g, n: g.elementwise_region(n, chain))
    assert kinds == ["host"]
    assert_close(got, ref, 0, 0, "host step")
    i, u = np.array([-1, 2, 5], np.int32), np.array([4, 2, 1], np.uint32)
    got, ref, kinds = run_region({"i": i, "u": u}, lambda g, n: g.elementwise_region(
        n, (ChainStep.compare(CmpOp.LT, IN(0), IN(1)),)))
    assert kinds == ["host"] and got.tolist() == [True, False, False] and ref.tolist() == got.tolist()

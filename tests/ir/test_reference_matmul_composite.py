"""Matmul-family composites (DotGeneral, LoraMatMul, FusedSwiGLU): shape rules, the direct numpy
reference against torch, the unfused graph against the reference, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from reference_helpers import ATOL, RTOL, run_both, t64
from reference_helpers import rand_plain_seeded as rand

from rlxpy.errors import GraphError
from rlxpy.ir import DType, Graph
from rlxpy.ir.passes import unfuse
from rlxpy.ir.reference import run_reference


# -- DotGeneral ---------------------------------------------------------------------------------
def tensordot_oracle(lhs, rhs, lc, rc, lb, rb) -> np.ndarray:
    """Independent path: torch.tensordot per batch element after moving batch axes to the front."""
    a, b = t64(lhs), t64(rhs)
    if not lb:
        return torch.tensordot(a, b, dims=(list(lc), list(rc))).numpy()
    a_rest = [d for d in range(a.ndim) if d not in lb]
    b_rest = [d for d in range(b.ndim) if d not in rb]
    a = a.permute(*lb, *a_rest)
    b = b.permute(*rb, *b_rest)
    batch_shape = a.shape[: len(lb)]
    a = a.reshape(-1, *a.shape[len(lb):])
    b = b.reshape(-1, *b.shape[len(rb):])
    a_con = [a_rest.index(d) for d in lc]
    b_con = [b_rest.index(d) for d in rc]
    parts = [torch.tensordot(a[i], b[i], dims=(a_con, b_con)) for i in range(a.shape[0])]
    out = torch.stack(parts)
    return out.reshape(*batch_shape, *out.shape[1:]).numpy()


DOT_CASES = [
    # lhs shape, rhs shape, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch
    ((3, 17), (17, 5), (1,), (0,), (), ()),  # plain matmul
    ((1, 1), (1, 1), (1,), (0,), (), ()),
    ((17, 3), (5, 17), (0,), (1,), (), ()),  # both transposed
    ((2, 3, 4), (4, 5, 3), (2, 1), (0, 2), (), ()),  # two contracting axes, out of order
    ((3,), (5,), (), (), (), ()),  # outer product
    ((7,), (7,), (0,), (0,), (), ()),  # inner product -> scalar
    ((2, 3, 17), (2, 17, 5), (2,), (1,), (0,), (0,)),  # batched matmul
    ((3, 2, 4, 5), (4, 6, 2), (2,), (0,), (1,), (2,)),  # batch axis in the middle, rhs batch last
    ((2, 3, 4, 5), (3, 2, 5, 1), (3,), (2,), (0, 1), (1, 0)),  # two batch axes, swapped
    ((1, 255), (255, 3), (1,), (0,), (), ()),
]


@pytest.mark.parametrize("case", DOT_CASES, ids=[str(c[:2]) for c in DOT_CASES])
def test_dot_general_matches_tensordot(case):
    lhs_shape, rhs_shape, lc, rc, lb, rb = case
    g = Graph()
    a = g.input("a", lhs_shape)
    b = g.input("b", rhs_shape)
    g.output(g.dot_general(a, b, lc, rc, lb, rb, name="dg"))
    lhs, rhs = rand(lhs_shape, 1), rand(rhs_shape, 2)
    got = run_both(g, {"a": lhs, "b": rhs})
    want = tensordot_oracle(lhs, rhs, lc, rc, lb, rb)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_dot_general_propagates_nan_and_inf():
    g = Graph()
    a = g.input("a", [2, 3])
    b = g.input("b", [3, 2])
    g.output(g.dot_general(a, b, [1], [0], name="dg"))
    lhs = np.array([[np.nan, 1, 2], [1, np.inf, 0.5]], np.float32)
    rhs = np.ones((3, 2), np.float32)
    got = run_both(g, {"a": lhs, "b": rhs})
    np.testing.assert_array_equal(got, lhs.astype(np.float64) @ rhs)


@pytest.mark.parametrize("args, message", [
    (([1], [1], [], []), "contracting sizes differ: lhs axis 1 is 3, rhs axis 1 is 5"),
    (([1], [], [], []), "differ in length"),
    (([1], [0], [0], []), "lhs_batch (0,) and rhs_batch () differ in length"),
    (([1, 1], [0, 0], [], []), "must be distinct axes"),
    (([2], [0], [], []), "must be distinct axes in [0, 2)"),
    (([0], [0], [0], [1]), "must be distinct axes"),
])
def test_dot_general_rejects_bad_axes(args, message):
    g = Graph()
    a = g.input("a", [4, 3])
    b = g.input("b", [3, 5])
    with pytest.raises(GraphError, match=r"^bad_dot \(DotGeneral\): ") as info:
        g.dot_general(a, b, *args, name="bad_dot")
    assert message in str(info.value)


def test_dot_general_rejects_mixed_dtypes():
    g = Graph()
    a = g.input("a", [4, 3])
    b = g.input("b", [3, 5], DType.F16)
    with pytest.raises(GraphError, match="mm .DotGeneral.: lhs f32.4, 3. and rhs f16.3, 5. dtypes differ"):
        g.dot_general(a, b, [1], [0], name="mm")


# -- LoraMatMul ---------------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape, n, r", [((1, 1), 1, 1), ((3, 17), 5, 2), ((2, 3, 17), 255, 4)])
def test_lora_matmul_matches_torch(x_shape, n, r):
    k = x_shape[-1]
    g = Graph()
    x = g.input("x", x_shape)
    w, a, b = g.param("w", [k, n]), g.param("a", [k, r]), g.param("b", [r, n])
    g.output(g.lora_matmul(x, w, a, b, scale=0.75, name="lora"))
    values = {"w": rand((k, n), 2), "a": rand((k, r), 3), "b": rand((r, n), 4)}
    xs = rand(x_shape, 1)
    got = run_both(g, {"x": xs}, values)
    # peft's LoRA forward: base(x) + lora_B(lora_A(x)) * scaling, with nn.Linear weights [out, in]
    base = F.linear(t64(xs), t64(values["w"]).T)
    lora = F.linear(F.linear(t64(xs), t64(values["a"]).T), t64(values["b"]).T) * 0.75
    np.testing.assert_allclose(got, (base + lora).numpy(), rtol=RTOL, atol=ATOL)


def test_lora_matmul_rejects_rank_mismatch():
    g = Graph()
    x = g.input("x", [3, 4])
    w, a, b = g.param("w", [4, 5]), g.param("a", [4, 2]), g.param("b", [3, 5])
    with pytest.raises(GraphError, match=r"lora \(LoraMatMul\): lora shapes disagree.*b f32\[3, 5\]"):
        g.lora_matmul(x, w, a, b, name="lora")


# -- FusedSwiGLU --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2,), (3, 34), (2, 3, 510)])
@pytest.mark.parametrize("gate_first", [True, False])
def test_swiglu_honours_gate_first(shape, gate_first):
    g = Graph()
    x = g.input("x", shape)
    g.output(g.swiglu(x, gate_first=gate_first, name="ffn.act"))
    xs = rand(shape, 5)
    got = run_both(g, {"x": xs})
    first, second = t64(xs).chunk(2, dim=-1)
    gate, up = (first, second) if gate_first else (second, first)
    np.testing.assert_allclose(got, (up * F.silu(gate)).numpy(), rtol=RTOL, atol=ATOL)


def test_swiglu_propagates_nan_and_inf_like_torch():
    g = Graph()
    x = g.input("x", [1, 8])
    g.output(g.swiglu(x, name="act"))
    xs = np.array([[np.nan, 1.0, np.inf, -np.inf, 2.0, np.nan, 3.0, 0.5]], np.float32)
    got = run_both(g, {"x": xs})
    gate, up = torch.from_numpy(xs).chunk(2, dim=-1)
    np.testing.assert_array_equal(got, (up * F.silu(gate)).numpy())


def test_swiglu_cast_to_f16():
    g = Graph()
    x = g.input("x", [3, 6])
    g.output(g.swiglu(x, cast_to="f16", name="act"))
    assert g["act"].dtype is DType.F16
    xs = rand((3, 6), 6)
    direct = run_reference(g, {"x": xs})["act"]
    unfused = run_reference(unfuse(g), {"x": xs})["act"]
    gate, up = torch.from_numpy(xs).chunk(2, dim=-1)
    want = (up * F.silu(gate)).to(torch.float16).numpy()
    assert direct.dtype == unfused.dtype == np.float16
    np.testing.assert_allclose(direct.astype(np.float32), want.astype(np.float32), rtol=1e-3)
    np.testing.assert_allclose(unfused.astype(np.float32), want.astype(np.float32), rtol=1e-3)


def test_swiglu_rejects_odd_last_dim():
    g = Graph()
    x = g.input("x", [2, 7])
    with pytest.raises(GraphError, match=r"^act \(FusedSwiGLU\): swiglu's last dim must be static and even"):
        g.swiglu(x, name="act")

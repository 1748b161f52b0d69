"""MatMul with a transposed operand (transpose_a: a stored [K, M]; transpose_b: b stored [N, K]) against
torch.matmul of the transposed tensors: the tiled GEMM reads them in place (no Transpose step), with
16-byte and word-by-word access, on sizes off the 64/128 tiles, the 8-wide K step and the 4-element
groups; batched, with a 2-D weight under leading dims, and split over K chunks (the weight gradient
X^T dY). Tolerance: TOL["matmul"] (f32 sums vs float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import TOL, assert_close, rand

import rlxpy
from rlxpy.errors import GraphError
from rlxpy.ir import ops
from rlxpy.wgpu_backend.lowering import matmul, matmul_skinny

FLAGS = [(True, False), (False, True), (True, True)]


def stored(shape: tuple[int, ...], transposed: bool) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2]) if transposed else shape


def run_transposed(a_shape, b_shape, flags, seed=0) -> tuple[np.ndarray, np.ndarray, list]:
    """(rlxpy, float64 torch, steps) of op(a) @ op(b) for the logical shapes a_shape x b_shape."""
    a = rand(stored(a_shape, flags[0]), seed=seed + 1)
    b = rand(stored(b_shape, flags[1]), seed=seed + 2)
    g = rlxpy.Graph("transposed")
    g.output(g.apply(ops.MatMul(*flags), [g.input("a", a.shape), g.input("b", b.shape)], name="y"))
    exe = rlxpy.compile(g)
    got = exe.run({"a": a, "b": b})["y"]
    ta, tb = torch.from_numpy(a).double(), torch.from_numpy(b).double()
    want = (ta.mT if flags[0] else ta) @ (tb.mT if flags[1] else tb)
    return got, want.numpy(), exe.schedule.steps


@pytest.mark.parametrize("vec4", [True, False], ids=["vec4", "words"])
@pytest.mark.parametrize("flags", FLAGS, ids=str)
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (17, 33, 65), (3, 255, 17), (129, 36, 132), (64, 12, 255)],
                         ids=str)
def test_transposed_operands_match_torch(device, monkeypatch, vec4, flags, m, k, n):
    monkeypatch.setattr(matmul_skinny, "SKINNY_F32", False)
    monkeypatch.setattr(matmul, "VEC4", vec4)
    got, want, steps = run_transposed((m, k), (k, n), flags, seed=m + n)
    (step,) = steps
    assert step.kernel == "matmul_tiled", "read in place: no transposed copy"
    aligned = n % 4 == 0 and k % 4 == 0 and (m % 4 == 0 or not flags[0])
    assert ("array<vec4<u32>>" in step.source) == (vec4 and aligned)
    assert_close(got, want, *TOL["matmul"], what=f"transposes {flags}")


@pytest.mark.parametrize("tile,core", [((128, 128), (16, "k32")), ((64, 128), None)], ids=str)
def test_every_tile_reads_transposed_operands(device, monkeypatch, tile, core):
    """Also a 16-deep 128x128 core (two vec4s of each operand per thread and step, block sums per
    32 of K) on K = 20: one full step and a partial one."""
    monkeypatch.setattr(matmul, "FORCE_TILE", tile)
    monkeypatch.setattr(matmul, "FORCE_CORE", core)
    for flags in FLAGS:
        got, want, _ = run_transposed((130, 20), (20, 136), flags, seed=3)
        assert_close(got, want, *TOL["matmul"], what=f"tile {tile}, core {core}, transposes {flags}")


@pytest.mark.parametrize("a_shape,b_shape", [((3, 17, 33), (3, 33, 65)), ((2, 2, 65, 8), (2, 2, 8, 3))],
                         ids=str)
def test_batched_transposed_operands(device, a_shape, b_shape):
    for flags in FLAGS:
        got, want, _ = run_transposed(a_shape, b_shape, flags, seed=5)
        assert_close(got, want, *TOL["matmul"], what=f"transposes {flags}")


def test_leading_dims_times_a_transposed_weight(device):
    """dY W^T: [B, S, N] x [K, N]^T folds B and S into the rows, like an untransposed 2-D weight."""
    got, want, steps = run_transposed((2, 3, 17, 33), (33, 65), (False, True), seed=7)
    assert [s.kernel for s in steps] == ["matmul_tiled"]
    assert_close(got, want, *TOL["matmul"])


@pytest.mark.parametrize("vec4", [True, False], ids=["vec4", "words"])
@pytest.mark.parametrize("flags", FLAGS, ids=str)
def test_split_k_over_a_transposed_operand(device, monkeypatch, vec4, flags):
    """X^T dY over many tokens: few output tiles, K cut into chunks (each chunk's first k moves down a
    transposed a's rows, along a transposed b's rows)."""
    monkeypatch.setattr(matmul, "VEC4", vec4)
    monkeypatch.setattr(matmul, "FORCE_SPLITS", 4)
    got, want, steps = run_transposed((68, 1024), (1024, 36), flags, seed=9)
    assert [s.kernel for s in steps] == ["matmul_tiled", "matmul_split_sum"] and steps[0].grid[2] == 4
    assert_close(got, want, *TOL["matmul"], what=f"transposes {flags}")


def test_a_transposed_a_needs_b_of_its_rank():
    g = rlxpy.Graph("bad")
    with pytest.raises(GraphError, match="transposed a needs b of its rank"):
        g.apply(ops.MatMul(transpose_a=True), [g.input("a", (2, 5, 3)), g.input("b", (5, 4))], name="y")


def test_reference_matches_torch():
    """The numpy reference of the flags (the autodiff tests' oracle path) against torch."""
    from rlxpy.ir.reference.matmul import ref_matmul

    a, b = rand((4, 7, 3), seed=11), rand((4, 5, 7), seed=12)
    got = ref_matmul(ops.MatMul(True, True), [a, b], None)
    want = torch.from_numpy(a).mT @ torch.from_numpy(b).mT
    assert got.shape == (4, 3, 5) and math.isclose(float(np.abs(got - want.numpy()).max()), 0.0, abs_tol=1e-5)

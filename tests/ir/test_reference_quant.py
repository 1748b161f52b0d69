"""Generic DequantMatMul schemes vs torch float8 decoding and hand-packed int4/int8/nvfp4 weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlxpy.errors import GraphError
from rlxpy.ir.graph import Graph
from rlxpy.ir.reference import run_reference


def _rand(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """4-bit codes, row-major, two per byte with the low nibble first (odd counts pad with 0)."""
    flat = (codes.reshape(-1) & 0xF).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def _run_dequant(x, w_bytes, scale, zp, scheme, k, n, block_size=32):
    g = Graph()
    ins = [g.input("x", x.shape), g.param("w", w_bytes.shape, "u8")]
    params = {"w": w_bytes}
    for name, value in (("scale", scale), ("zp", zp)):
        if value is not None:
            dtype = "u8" if value.dtype == np.uint8 else "f32"
            ins.append(g.param(name, value.shape, dtype))
            params[name] = value
    y = g.dequant_matmul(ins[0], ins[1], ins[2] if len(ins) > 2 else None, ins[3] if len(ins) > 3 else None,
                         scheme, k, n, block_size)
    g.output(y)
    return run_reference(g, {"x": x}, params)[y.name]


def _expand_blocks(table: np.ndarray, k: int, block: int) -> torch.Tensor:
    return torch.from_numpy(table).double().repeat_interleave(block, dim=0)[:k]


def _check(got, x, weight):
    want = torch.from_numpy(x).double() @ weight
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


SHAPES = [((1, 1), 1, 1, 32), ((3, 17), 17, 5, 8), ((2, 3, 64), 64, 33, 32), ((4, 33), 33, 3, 16)]


@pytest.mark.parametrize("x_shape, k, n, block", SHAPES)
@pytest.mark.parametrize("scheme", ["int8", "int8_asym"])
def test_int8_schemes_match_hand_packing(scheme, x_shape, k, n, block):
    rng = np.random.default_rng(k * n)
    q = rng.integers(-128, 128, (k, n)).astype(np.int8)
    blocks = -(-k // block)
    scale = rng.uniform(0.001, 0.05, (blocks, n)).astype(np.float32)
    zp = rng.integers(-5, 5, (blocks, n)).astype(np.float32) if scheme == "int8_asym" else None
    x = _rand(x_shape, 1)
    got = _run_dequant(x, q.view(np.uint8).reshape(-1), scale, zp, scheme, k, n, block)
    weight = torch.from_numpy(q.astype(np.float64))
    if zp is not None:
        weight = weight - _expand_blocks(zp, k, block)
    _check(got, x, weight * _expand_blocks(scale, k, block))


@pytest.mark.parametrize("x_shape, k, n, block", SHAPES)
def test_int4_matches_hand_packing(x_shape, k, n, block):
    rng = np.random.default_rng(k + n)
    q = rng.integers(-8, 8, (k, n))
    blocks = -(-k // block)
    scale = rng.uniform(0.01, 0.1, (blocks, n)).astype(np.float32)
    x = _rand(x_shape, 2)
    got = _run_dequant(x, _pack_nibbles(q), scale, None, "int4", k, n, block)
    _check(got, x, torch.from_numpy(q.astype(np.float64)) * _expand_blocks(scale, k, block))


FP8 = [("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)]


def _torch_fp8(codes: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """torch's float8 decoding, with the scheme's rule that inf/NaN codes read as 0."""
    values = torch.from_numpy(codes.astype(np.uint8)).view(dtype).double()
    return torch.where(torch.isfinite(values), values, torch.zeros_like(values))


@pytest.mark.parametrize("scheme, dtype", FP8)
def test_fp8_decodes_every_code_like_torch(scheme, dtype):
    codes = np.arange(256, dtype=np.uint8).reshape(256, 1)
    x = np.eye(256, dtype=np.float32)[:, :256]  # identity: the product is the decoded column itself
    got = _run_dequant(x, codes.reshape(-1), None, None, scheme, 256, 1)
    want = _torch_fp8(codes, dtype)
    np.testing.assert_array_equal(got, want.numpy().astype(np.float32))
    assert np.isfinite(got).all()


@pytest.mark.parametrize("x_shape, k, n, block", SHAPES)
@pytest.mark.parametrize("scheme, dtype", FP8)
def test_fp8_matmul_matches_torch_float8(scheme, dtype, x_shape, k, n, block):
    codes = np.random.default_rng(k).integers(0, 256, (k, n)).astype(np.uint8)
    x = _rand(x_shape, 3, 0.01)
    got = _run_dequant(x, codes.reshape(-1), None, None, scheme, k, n)
    want = torch.from_numpy(x).double() @ _torch_fp8(codes, dtype)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-4)


def _e2m1(code: int) -> float:
    """FP4 E2M1 from its bits: sign, 2 exponent bits (bias 1), 1 mantissa bit."""
    sign = -1.0 if code & 0b1000 else 1.0
    exponent, mantissa = (code >> 1) & 0b11, code & 1
    magnitude = mantissa * 0.5 if exponent == 0 else (1 + mantissa / 2) * 2.0 ** (exponent - 1)
    return sign * magnitude


@pytest.mark.parametrize("x_shape, k, n", [((1, 1), 1, 1), ((3, 17), 17, 5), ((2, 3, 48), 48, 7)])
def test_nvfp4_matches_hand_packing(x_shape, k, n):
    rng = np.random.default_rng(k * 7 + n)
    codes = rng.integers(0, 16, (k, n))
    groups = -(-k // 16)
    # positive finite e4m3 codes for the group scales (0x01..0x7E)
    scale_codes = rng.integers(0x30, 0x48, (groups, n)).astype(np.uint8)
    global_scale = np.array([0.37], np.float32)
    x = _rand(x_shape, 4)
    got = _run_dequant(x, _pack_nibbles(codes), scale_codes.reshape(-1), global_scale, "nvfp4", k, n,
                       block_size=32)  # nvfp4 groups are always 16 along K, whatever block_size says
    values = torch.tensor([[_e2m1(int(c)) for c in row] for row in codes], dtype=torch.float64)
    group_scale = torch.from_numpy(scale_codes).view(torch.float8_e4m3fn).double()
    weight = values * group_scale.repeat_interleave(16, dim=0)[:k] * 0.37
    np.testing.assert_allclose(got, (torch.from_numpy(x).double() @ weight).numpy(), rtol=1e-5, atol=1e-5)


def test_dequant_nan_in_x_propagates_to_its_row():
    q = np.ones((4, 3), np.int8)
    x = np.ones((2, 4), np.float32)
    x[1, 2] = np.nan
    got = _run_dequant(x, q.view(np.uint8).reshape(-1), np.ones((1, 3), np.float32), None, "int8", 4, 3)
    np.testing.assert_array_equal(got[0], [4, 4, 4])
    assert np.isnan(got[1]).all()


def test_dequant_errors_name_the_node():
    x = np.ones((2, 8), np.float32)
    w = np.zeros(16, np.uint8)
    with pytest.raises(GraphError, match=r"\(DequantMatMul\): scheme int8_asym takes inputs x, w_q, scale"):
        _run_dequant(x, np.zeros(32, np.uint8), np.ones((1, 4), np.float32), None, "int8_asym", 8, 4)
    with pytest.raises(GraphError, match=r"int8 weight \[8, 4\] needs 32 bytes, got 16"):
        _run_dequant(x, w, np.ones((1, 4), np.float32), None, "int8", 8, 4)
    with pytest.raises(GraphError, match=r"scale must hold ceil\(K/4\)\*N = 8 values"):
        _run_dequant(x, np.zeros(16, np.uint8), np.ones((1, 4), np.float32), None, "int4", 8, 4, block_size=4)
    with pytest.raises(GraphError, match="nvfp4 scales need ceil"):
        _run_dequant(x, w, np.zeros(2, np.uint8), np.ones(1, np.float32), "nvfp4", 8, 4)
    g = Graph()
    with pytest.raises(GraphError, match=r"dq \(DequantMatMul\): unknown scheme 'int2'"):
        g.dequant_matmul(g.input("x", (2, 8)), g.param("w", (8,), "u8"), None, None, "int2", 8, 4, name="dq")

"""Generic DequantMatMul (int8 / int8_asym / int4 / fp8 / nvfp4) on the GPU.

Oracle: a decoder written here independently of the reference (torch's float8 dtypes for the
minifloats, bit tricks for the nibbles), then torch matmul in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import assert_close

import rlxpy
from rlxpy.errors import GraphError, UnsupportedOpError
from rlxpy.ir.dtype import DType
from rlxpy.ir.reference import run_reference

SCHEMES = ("int8", "int8_asym", "int4", "fp8_e4m3", "fp8_e5m2", "nvfp4")
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def nibbles(raw: np.ndarray, count: int) -> np.ndarray:
    out = np.empty(2 * raw.size, np.int64)
    out[0::2], out[1::2] = raw & 0xF, raw >> 4
    return out[:count]


def minifloat(raw: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """OCP fp8 via torch; NaN (and e5m2 inf) decode to 0 as the format table says."""
    values = torch.from_numpy(np.ascontiguousarray(raw, np.uint8)).view(dtype).double().numpy()
    return np.where(np.isfinite(values), values, 0.0)


def oracle_weight(scheme: str, k: int, n: int, block: int, raw: np.ndarray, scale=None,
                  zp=None) -> np.ndarray:
    """W [k, n] in float64, decoded independently of rlxpy."""
    count = k * n
    rows = np.arange(k) // (16 if scheme == "nvfp4" else block)
    if scheme in ("int8", "int8_asym"):
        q = raw[:count].view(np.int8).astype(np.float64).reshape(k, n)
        if scheme == "int8_asym":
            q = q - zp.astype(np.float64)[rows]
        return q * scale.astype(np.float64)[rows]
    if scheme == "int4":
        q = ((nibbles(raw, count) ^ 8) - 8).astype(np.float64).reshape(k, n)
        return q * scale.astype(np.float64)[rows]
    if scheme == "fp8_e4m3":
        return minifloat(raw[:count], torch.float8_e4m3fn).reshape(k, n)
    if scheme == "fp8_e5m2":
        return minifloat(raw[:count], torch.float8_e5m2).reshape(k, n)
    group = minifloat(scale, torch.float8_e4m3fn).reshape(-1, n)[rows]
    return E2M1[nibbles(raw, count)].reshape(k, n) * group * float(zp.reshape(-1)[0])


def make_case(scheme: str, k: int, n: int, block: int, rng: np.random.Generator, global_scale: float = 0.37):
    """(params dict, weight bytes, scale, zp) with random codes over the whole code space."""
    bits = 4 if scheme in ("int4", "nvfp4") else 8
    raw = rng.integers(0, 256, (k * n * bits + 7) // 8, dtype=np.uint8)
    scale = zp = None
    if scheme in ("int8", "int8_asym", "int4"):
        scale = rng.uniform(-0.1, 0.1, (-(-k // block), n)).astype(np.float32)
        if scheme == "int8_asym":
            zp = rng.uniform(-4, 4, scale.shape).astype(np.float32)
    elif scheme == "nvfp4":
        scale = rng.integers(0, 0x7F, -(-k // 16) * n, dtype=np.uint8)  # finite e4m3 codes
        zp = np.array([global_scale], np.float32)
    return raw, scale, zp


def build(g: rlxpy.Graph, tag: str, scheme: str, x, k: int, n: int, block: int, raw, scale, zp, params: dict):
    params[f"w{tag}"] = raw
    w = g.param(f"w{tag}", raw.shape, DType.U8)
    s = z = None
    if scale is not None:
        params[f"s{tag}"] = scale
        s = g.param(f"s{tag}", scale.shape, DType.parse(scale.dtype))
    if zp is not None:
        params[f"z{tag}"] = zp
        z = g.param(f"z{tag}", zp.shape, DType.F32)
    return g.dequant_matmul(x, w, s, z, scheme, k, n, block, name=f"y{tag}")


def run(g: rlxpy.Graph, params: dict, feeds: dict):
    exe = rlxpy.compile(g)
    for name, value in params.items():
        exe.set_param(name, value)
    return exe, exe.run(feeds)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_dequant_matmul_matches_torch(device, scheme):
    # (k, n, x rows, block): odd k/n/block; 1 and 5 rows take the GEMV, 17 the tiled kernel
    cases = [(37, 19, 1, 8), (40, 33, 5, 16), (37, 17, 17, 5), (3, 1, 17, 32), (64, 70, 3, 32)]
    rng = np.random.default_rng(1)
    g = rlxpy.Graph(f"dq_{scheme}")
    params, feeds, decoded = {}, {}, {}
    for i, (k, n, rows, block) in enumerate(cases):
        feeds[f"x{i}"] = rng.standard_normal((rows, k)).astype(np.float32)
        raw, scale, zp = make_case(scheme, k, n, block, rng)
        decoded[i] = oracle_weight(scheme, k, n, block, raw, scale, zp)
        g.output(build(g, str(i), scheme, g.input(f"x{i}", (rows, k)), k, n, block, raw, scale, zp, params))
    exe, got = run(g, params, feeds)
    assert [s.kernel for s in exe.schedule.steps] == [
        "quant_generic_gemv" if rows <= 8 else "quant_generic_tiled" for _, _, rows, _ in cases]
    ref = run_reference(g, feeds, params)
    for i in range(len(cases)):
        want = (torch.from_numpy(feeds[f"x{i}"]).double() @ torch.from_numpy(decoded[i])).numpy()
        tol = 1e-5 * np.abs(feeds[f"x{i}"]).astype(np.float64) @ np.abs(decoded[i]) + 1e-6
        assert (np.abs(got[f"y{i}"] - want) <= tol).all(), f"{scheme} case {i}: GPU vs torch"
        assert_close(ref[f"y{i}"], want, 1e-6, 1e-5, f"{scheme} case {i}: reference vs torch")


@pytest.mark.parametrize("scheme", ("int4", "nvfp4"))
def test_gemv_past_the_loop_limit_walks_k_in_dispatches(device, scheme):
    # one GEMV thread walks all of K: 70001 steps of its loop (lavapipe silently stops an invocation
    # after 65535: a third of the output was wrong); now three dispatches each add their part of K
    k, n, rows, block = 70001, 6, 3, 64
    rng = np.random.default_rng(5)
    g = rlxpy.Graph(f"dq_long_{scheme}")
    params, feeds = {}, {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    raw, scale, zp = make_case(scheme, k, n, block, rng)
    g.output(build(g, "0", scheme, g.input("x", (rows, k)), k, n, block, raw, scale, zp, params))
    exe, got = run(g, params, feeds)
    assert [s.kernel for s in exe.schedule.steps] == ["quant_generic_gemv"] * 3
    decoded = oracle_weight(scheme, k, n, block, raw, scale, zp)
    want = (torch.from_numpy(feeds["x"]).double() @ torch.from_numpy(decoded)).numpy()
    tol = 1e-5 * np.abs(feeds["x"]).astype(np.float64) @ np.abs(decoded) + 1e-6
    assert (np.abs(got["y0"] - want) <= tol).all()


@pytest.mark.parametrize("scheme", ("int8", "int4", "fp8_e4m3", "fp8_e5m2", "nvfp4"))
def test_every_code_decodes_exactly(device, scheme):
    """x = identity rows, so y = dequant(W) with no rounding: every code of the format appears."""
    k, n = 64, 8  # 512 elements: every 8-bit code twice, every nibble many times
    rng = np.random.default_rng(2)
    raw, scale, zp = make_case(scheme, k, n, 32, rng, global_scale=0.5)  # power of 2: exact
    if scheme in ("int8", "fp8_e4m3", "fp8_e5m2"):
        raw = np.tile(np.arange(256, dtype=np.uint8), 2)
    eye = np.eye(k, dtype=np.float32)
    g = rlxpy.Graph(f"codes_{scheme}")
    params = {}
    tiled = build(g, "t", scheme, g.input("eye", (k, k)), k, n, 32, raw, scale, zp, params)
    gemv = build(g, "g", scheme, g.input("eye8", (8, k)), k, n, 32, raw, scale, zp, params)
    g.output(tiled, gemv)
    _, got = run(g, params, {"eye": eye, "eye8": eye[:8]})
    want = oracle_weight(scheme, k, n, 32, raw, scale, zp).astype(np.float32)
    np.testing.assert_array_equal(got["yt"], want, err_msg=f"{scheme}: tiled decode")
    np.testing.assert_array_equal(got["yg"], want[:8], err_msg=f"{scheme}: GEMV decode")


def test_nan_in_x_propagates(device):
    rng = np.random.default_rng(3)
    raw, scale, _ = make_case("int8", 16, 5, 8, rng)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    x[1, 3] = np.nan
    g = rlxpy.Graph("dq_nan")
    params = {}
    g.output(build(g, "", "int8", g.input("x", x.shape), 16, 5, 8, raw, scale, None, params))
    _, got = run(g, params, {"x": x})
    assert np.isfinite(got["y"][0]).all() and np.isnan(got["y"][1]).all()


def test_bad_inputs_are_graph_errors_naming_the_node(device):
    def compile_one(scheme, w_bytes, scale_shape, scale_dtype=DType.F32, zp=False):
        g = rlxpy.Graph("dq_bad")
        s = g.param("s", scale_shape, scale_dtype) if scale_shape else None
        z = g.param("z", scale_shape, DType.F32) if zp else None
        w = g.param("w", (w_bytes,), DType.U8)
        g.output(g.dequant_matmul(g.input("x", (1, 16)), w, s, z, scheme, 16, 5, 8, name="proj"))
        return rlxpy.compile(g)

    with pytest.raises(GraphError, match=r"proj \(DequantMatMul\): scale must hold ceil\(K/8\)\*N = 10"):
        compile_one("int8", 80, (3, 5))
    with pytest.raises(GraphError, match=r"proj.*scheme int8_asym takes inputs x, w_q, scale, zp"):
        compile_one("int8_asym", 80, (2, 5))
    with pytest.raises(GraphError, match=r"proj \(DequantMatMul\): int4 weight \[16, 5\] needs 40 bytes"):
        compile_one("int4", 39, (2, 5))
    with pytest.raises(UnsupportedOpError, match=r"proj \(DequantMatMul\): int8 scale must be f32"):
        compile_one("int8", 80, (2, 5), DType.F16)

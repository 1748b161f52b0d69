"""The numpy reference of the GGUF quant ops against GGML block decoders written here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from reference_helpers import close_loose as close
from reference_helpers import rand_plain as rand
from reference_helpers import run, t

from rlxpy.ir.ops.quant import gguf_row_bytes


# -- GGUF quantised ops ----------------------------------------------------------------------------------
def _f16(block: np.ndarray, start: int) -> float:
    return float(block[start:start + 2].view(np.float16)[0])


def _decode_legacy(block: np.ndarray, qtype: str) -> np.ndarray:
    """One 32-element block, read field by field as ggml's dequantize_row_* does."""
    y = np.zeros(32)
    if qtype == "Q8_0":  # d f16, 32 x i8
        d = _f16(block, 0)
        return d * block[2:34].view(np.int8).astype(np.float64)
    has_min = qtype in ("Q4_1", "Q5_1")
    d = _f16(block, 0)
    m = _f16(block, 2) if has_min else 0.0
    at = 4 if has_min else 2
    high = 0
    if qtype in ("Q5_0", "Q5_1"):  # 32 high bits, element j's fifth bit is bit j
        high = int.from_bytes(bytes(block[at:at + 4]), "little")
        at += 4
    nibbles = block[at:at + 16]
    for j in range(16):
        low, up = int(nibbles[j]) & 0xF, int(nibbles[j]) >> 4
        if qtype in ("Q5_0", "Q5_1"):
            low |= ((high >> j) & 1) << 4
            up |= ((high >> (j + 16)) & 1) << 4
        if has_min:
            y[j], y[j + 16] = low * d + m, up * d + m
        else:
            offset = 16 if qtype == "Q5_0" else 8
            y[j], y[j + 16] = (low - offset) * d, (up - offset) * d
    return y


def _scale_min_k4(j: int, q: np.ndarray) -> tuple[int, int]:
    if j < 4:
        return int(q[j]) & 63, int(q[j + 4]) & 63
    return ((int(q[j + 4]) & 0xF) | ((int(q[j - 4]) >> 6) << 4),
            (int(q[j + 4]) >> 4) | ((int(q[j]) >> 6) << 4))


def _decode_q4_k(block: np.ndarray) -> np.ndarray:
    """d f16, dmin f16, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles (ggml dequantize_row_q4_K)."""
    d, dmin, scales, qs = _f16(block, 0), _f16(block, 2), block[4:16], block[16:144]
    y = np.zeros(256)
    for chunk in range(4):
        sc1, m1 = _scale_min_k4(2 * chunk, scales)
        sc2, m2 = _scale_min_k4(2 * chunk + 1, scales)
        q = qs[32 * chunk: 32 * chunk + 32].astype(np.int64)
        y[64 * chunk: 64 * chunk + 32] = d * sc1 * (q & 0xF) - dmin * m1
        y[64 * chunk + 32: 64 * chunk + 64] = d * sc2 * (q >> 4) - dmin * m2
    return y


def _decode_q6_k(block: np.ndarray) -> np.ndarray:
    """128 low nibbles, 64 bytes of 2-bit highs, 16 i8 scales, d f16 (ggml dequantize_row_q6_K)."""
    ql, qh = block[0:128].astype(np.int64), block[128:192].astype(np.int64)
    scales, d = block[192:208].view(np.int8).astype(np.int64), _f16(block, 208)
    y = np.zeros(256)
    for half in range(2):
        low, high, sc = ql[64 * half:], qh[32 * half:], scales[8 * half:]
        for lane in range(32):
            group = lane // 16
            values = [((low[lane] & 0xF) | ((high[lane] >> 0) & 3) << 4) - 32,
                      ((low[lane + 32] & 0xF) | ((high[lane] >> 2) & 3) << 4) - 32,
                      ((low[lane] >> 4) | ((high[lane] >> 4) & 3) << 4) - 32,
                      ((low[lane + 32] >> 4) | ((high[lane] >> 6) & 3) << 4) - 32]
            for quarter, value in enumerate(values):
                y[128 * half + 32 * quarter + lane] = d * sc[group + 2 * quarter] * value
    return y


def decode_rows(raw: np.ndarray, qtype: str, k: int) -> np.ndarray:
    """[rows, row_bytes] u8 -> [rows, k] f64 with the decoders above."""
    block_bytes = gguf_row_bytes(qtype, k) // (k // (256 if qtype.endswith("_K") else 32))
    decode = {"Q4_K": _decode_q4_k, "Q6_K": _decode_q6_k}.get(qtype, lambda b: _decode_legacy(b, qtype))
    return np.stack([np.concatenate([decode(row[i:i + block_bytes]) for i in range(0, row.size, block_bytes)])
                     for row in raw])


def make_weight(qtype: str, rows: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """GGUF bytes [rows, row_bytes] and the floats they came from (None-like zeros for K-quants).

    Legacy types go through gguf.quants.quantize; it cannot quantize K-quants, so those get random
    blocks whose f16 scale fields are set to small finite values."""
    rng = np.random.default_rng(seed)
    if not qtype.endswith("_K"):
        source = rng.standard_normal((rows, k)).astype(np.float32)
        return quants.quantize(source, GGMLQuantizationType[qtype]), source
    raw = rng.integers(0, 256, (rows, gguf_row_bytes(qtype, k)), dtype=np.uint8)
    blocks = raw.reshape(rows, -1, 144 if qtype == "Q4_K" else 210)
    scale_fields = (0, 2) if qtype == "Q4_K" else (208,)
    for at in scale_fields:
        scale = rng.uniform(0.001, 0.02, blocks.shape[:2] + (1,)).astype(np.float16)
        blocks[..., at:at + 2] = scale.view(np.uint8)
    return raw, np.zeros((rows, k), np.float32)


LEGACY = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]


QTYPES = LEGACY + ["Q4_K", "Q6_K"]


@pytest.mark.parametrize("qtype", LEGACY)
def test_gguf_quantize_then_decode_round_trips_approximately(qtype):
    raw, source = make_weight(qtype, 3, 96, seed=50)
    decoded = decode_rows(raw, qtype, 96)
    step = {"Q8_0": 1 / 127, "Q4_0": 1 / 7, "Q4_1": 1 / 15, "Q5_0": 1 / 15, "Q5_1": 1 / 31}[qtype]
    assert np.abs(decoded - source).max() <= step * np.abs(source).max() * 1.01


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("x_shape,n", [((3, -1), 17), ((1, -1), 1), ((2, 3, -1), 3)], ids=str)
def test_dequant_matmul_gguf_matches_independent_decoder(qtype, x_shape, n):
    k = 256 if qtype.endswith("_K") else 96
    raw, _ = make_weight(qtype, n, k, seed=51)
    x = rand(tuple(k if d == -1 else d for d in x_shape), 52)
    out = run(lambda g, a, w: g.dequant_matmul_gguf(a, w, qtype, n, k), x=x, w=raw)
    assert out.dtype == np.float32 and out.shape == x.shape[:-1] + (n,)
    close(out, t(x).double() @ torch.from_numpy(decode_rows(raw, qtype, k)).T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1", "Q6_K"])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.float32])
def test_gather_gguf_clamps_and_decodes_rows(qtype, idx_dtype):
    k = 256 if qtype.endswith("_K") else 64
    raw, _ = make_weight(qtype, 17, k, seed=53)
    idx = np.array([[0, 16, 5], [-4, 30, 3]], dtype=idx_dtype)
    out = run(lambda g, table, i: g.gather_gguf(table, i, qtype, k), table=raw, idx=idx)
    assert out.shape == (2, 3, k)
    close(out, decode_rows(raw, qtype, k)[np.clip(idx.astype(np.int64), 0, 16)], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1", "Q5_0", "Q4_K"])
def test_dequant_grouped_matmul_routes_rows_to_experts(qtype):
    k = 256 if qtype.endswith("_K") else 64
    experts, n = 3, 5
    raw = np.stack([make_weight(qtype, n, k, seed=60 + e)[0] for e in range(experts)])  # [E, n, row_bytes]
    x = rand((17, k), 54)
    idx = np.array([0, 1, 2, 2, 1, 0, -1, 3, 1, 0, 2, 2, 2, 1, 0, 1, 9], dtype=np.int32)
    out = run(lambda g, a, w, i: g.dequant_grouped_matmul(a, w, i, qtype, n, k), x=x, w=raw, idx=idx)
    weights = [torch.from_numpy(decode_rows(raw[e], qtype, k)) for e in range(experts)]
    expected = torch.stack([t(x[row]).double() @ weights[e].T if 0 <= e < experts else torch.zeros(n)
                            for row, e in enumerate(idx)])
    close(out, expected, rtol=1e-5, atol=1e-4)

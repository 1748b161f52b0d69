"""Host fallback for GGUF types without a WGSL decoder (Q8_1, Q8_K, IQ4_NL, IQ4_XS).

Weights are dequantised with gguf-py's ``quants.dequantize`` where gguf-py knows the type (the
IQ formats), and with the small numpy decoders below where it does not (Q8_1, Q8_K: llama.cpp's
``dequantize_row_q8_1`` has no Python twin, and gguf-py's Q8_1 size is the 40-byte f32 layout).
The product is computed in float64 and stored as f32, like the reference interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlxpy.ir.ops.quant import GGUF_BLOCKS
from rlxpy.ir.reference.shape import clamp_indices

HostFn = Callable[[Any], None]


def _q8_1(blocks: np.ndarray) -> np.ndarray:
    """Q8_1 (40 bytes): f32 d, f32 s (= d * sum(q), unused here), 32 x i8; value = d * q."""
    d = blocks[:, 0:4].copy().view("<f4").astype(np.float32)
    q = blocks[:, 8:40].view(np.int8).astype(np.float32)
    return d * q


def _q8_k(blocks: np.ndarray) -> np.ndarray:
    """Q8_K (292 bytes): f32 d, 256 x i8, 16 x i16 block sums (unused here); value = d * q."""
    d = blocks[:, 0:4].copy().view("<f4").astype(np.float32)
    q = blocks[:, 4:260].view(np.int8).astype(np.float32)
    return d * q


_OWN_DECODERS = {"Q8_1": _q8_1, "Q8_K": _q8_k}


def dequantize(raw: np.ndarray, qtype: str, rows: int, k: int) -> np.ndarray:
    """GGML rows (u8 [rows, row_bytes]) -> f32 [rows, k]."""
    block, size = GGUF_BLOCKS[qtype]
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if qtype in _OWN_DECODERS:
        blocks = data.reshape(-1, size)
        return _OWN_DECODERS[qtype](blocks).reshape(rows, k)
    from gguf import GGMLQuantizationType, quants

    values = quants.dequantize(data.reshape(rows, -1), GGMLQuantizationType[qtype])
    return np.asarray(values, dtype=np.float32).reshape(rows, k)


def matmul_step(x_id: int, w_id: int, y_id: int, qtype: str, n: int, k: int) -> HostFn:
    """``y = x @ dequant(W)^T`` (ggml_mul_mat) for x [..., k], W u8 [n, row_bytes]."""

    def run(io: Any) -> None:
        x = np.asarray(io.read(x_id), dtype=np.float64)
        weight = dequantize(io.read(w_id), qtype, n, k).astype(np.float64)
        y = x.reshape(-1, k) @ weight.T
        io.write(y_id, y.reshape(*x.shape[:-1], n).astype(np.float32))

    return run


def gather_step(table_id: int, idx_id: int, y_id: int, qtype: str, k: int) -> HostFn:
    """Embedding rows ``dequant(table[clamp(idx)])``; only the named rows are dequantised."""

    def run(io: Any) -> None:
        table = io.read(table_id)
        idx = io.read(idx_id)
        rows = clamp_indices(np.asarray(idx), table.shape[0]).ravel()
        values = dequantize(table[rows], qtype, len(rows), k)
        io.write(y_id, values.reshape(*np.shape(idx), k))

    return run


def grouped_step(x_id: int, w_id: int, idx_id: int, y_id: int, qtype: str, n: int, k: int) -> HostFn:
    """MoE ``y[i] = x[i] @ dequant(W[trunc(idx[i])])^T``; an out-of-range expert gives a zero row."""

    def run(io: Any) -> None:
        x = np.asarray(io.read(x_id), dtype=np.float64)
        w = io.read(w_id)
        experts = np.trunc(np.asarray(io.read(idx_id), dtype=np.float64))
        y = np.zeros((x.shape[0], n), dtype=np.float64)
        for expert in np.unique(experts[np.isfinite(experts)]):
            if 0 <= expert < w.shape[0]:
                rows = experts == expert
                weight = dequantize(w[int(expert)], qtype, n, k).astype(np.float64)
                y[rows] = x[rows] @ weight.T
        io.write(y_id, y.astype(np.float32))

    return run

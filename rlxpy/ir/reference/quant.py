"""Reference semantics of the quant family. Generic (non-GGUF) DequantMatMul schemes:

W is [K, N] row-major: flat element ``e = kk*N + col``. 8-bit schemes store byte e; 4-bit
schemes store element e in byte e//2, low nibble first. Scales (and zero points) run along K in
blocks, one per column: ``scale[(kk // block) * N + col]``.

GGUF block formats are decoded by gguf-py (the independent decoder).
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType, quants

from rlxpy.errors import GraphError, where
from rlxpy.ir import ops
from rlxpy.ir.ops import DequantMatMul
from rlxpy.ir.ops.quant import ROPE_ROLES
from rlxpy.ir.reference.core import reference
from rlxpy.ir.reference.norm import rms_norm
from rlxpy.ir.reference.rope import ref_rope_kv_append
from rlxpy.ir.reference.shape import clamp_indices

#: E2M1 (nvfp4) code -> value; codes 8..15 are the negatives of 0..7.
FP4_E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


FP4_E2M1_TABLE = np.concatenate([FP4_E2M1_VALUES, -FP4_E2M1_VALUES])


NVFP4_GROUP = 16  # fixed by the format, whatever block_size says


_NEEDS = {"int8": 3, "int8_asym": 4, "int4": 3, "fp8_e4m3": 2, "fp8_e5m2": 2, "nvfp4": 4}


_INPUT_NAMES = {2: "x, w_q", 3: "x, w_q, scale", 4: "x, w_q, scale, zp"}


def raw_bytes(value: np.ndarray) -> np.ndarray:
    """A tensor's storage bytes (packed weights are u8 tensors; other dtypes are reinterpreted)."""
    return np.frombuffer(np.ascontiguousarray(value).tobytes(), dtype=np.uint8)


def decode_fp8_e4m3(codes: np.ndarray) -> np.ndarray:
    """OCP E4M3 (bias 7, no inf): the NaN codes 0x7F/0xFF decode to 0."""
    b = codes.astype(np.int64)
    exponent, mantissa = (b >> 3) & 0xF, (b & 0x7).astype(np.float64)
    subnormal = mantissa / 8.0 * 2.0**-6
    magnitude = np.where(exponent == 0, subnormal, (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7))
    magnitude = np.where((b & 0x7F) == 0x7F, 0.0, magnitude)
    return np.where(b & 0x80, -magnitude, magnitude)


def decode_fp8_e5m2(codes: np.ndarray) -> np.ndarray:
    """OCP E5M2 (bias 15): inf and NaN codes (exponent 31) decode to 0."""
    b = codes.astype(np.int64)
    exponent, mantissa = (b >> 2) & 0x1F, (b & 0x3).astype(np.float64)
    subnormal = mantissa / 4.0 * 2.0**-14
    magnitude = np.where(exponent == 0, subnormal, (1.0 + mantissa / 4.0) * 2.0 ** (exponent - 15))
    magnitude = np.where(exponent == 31, 0.0, magnitude)
    return np.where(b & 0x80, -magnitude, magnitude)


def _nibbles(data: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` 4-bit codes, low nibble of each byte first."""
    pairs = np.stack([data & 0xF, data >> 4], axis=-1).reshape(-1)
    return pairs[:count]


def _block_scales(scale: np.ndarray, k: int, n: int, block: int, what: str, node) -> np.ndarray:
    """Per-element [K, N] values of a [ceil(K/block), N] block table."""
    blocks = -(-k // block)
    if scale.size != blocks * n:
        raise GraphError(f"{where(node)}: {what} must hold ceil(K/{block})*N = {blocks * n} values "
                         f"([{blocks}, {n}]), got {scale.size}")
    return np.repeat(scale.reshape(blocks, n).astype(np.float64), block, axis=0)[:k]


def dequantize_weight(op: DequantMatMul, args, node) -> np.ndarray:
    """W [K, N] float64 decoded per ``op.scheme``."""
    scheme, k, n = op.scheme, op.k, op.n
    if len(args) < _NEEDS[scheme]:
        raise GraphError(f"{where(node)}: scheme {scheme} takes inputs {_INPUT_NAMES[_NEEDS[scheme]]}, "
                         f"got {len(args)}")
    count = k * n
    bits = 4 if scheme in ("int4", "nvfp4") else 8
    data = raw_bytes(args[1])
    need_bytes = -(-count * bits // 8)
    if data.size < need_bytes:
        raise GraphError(f"{where(node)}: {scheme} weight [{k}, {n}] needs {need_bytes} bytes, "
                         f"got {data.size}")
    if bits == 8:
        codes = data[:count]
    else:
        codes = _nibbles(data[:need_bytes], count)
    if scheme == "fp8_e4m3":
        return decode_fp8_e4m3(codes).reshape(k, n)
    if scheme == "fp8_e5m2":
        return decode_fp8_e5m2(codes).reshape(k, n)
    if scheme == "nvfp4":
        scale_bytes = raw_bytes(args[2])
        blocks = -(-k // NVFP4_GROUP)
        if scale_bytes.size < blocks * n:
            raise GraphError(f"{where(node)}: nvfp4 scales need ceil(K/16)*N = {blocks * n} e4m3 bytes, "
                             f"got {scale_bytes.size}")
        group_scale = _block_scales(decode_fp8_e4m3(scale_bytes[: blocks * n]), k, n, NVFP4_GROUP, "scale",
                                    node)
        zp = args[3]  # the global scale: the first f32 of the zp slot
        first = zp.reshape(-1)[0] if zp.dtype.kind == "f" else raw_bytes(zp)[:4].view("<f4")[0]
        global_scale = float(first)
        return FP4_E2M1_TABLE[codes].reshape(k, n) * group_scale * global_scale
    signed = codes.astype(np.int64)
    half = 1 << (bits - 1)  # two's complement: codes >= 2^(bits-1) are negative
    signed = np.where(signed >= half, signed - 2 * half, signed)
    scale = _block_scales(args[2], k, n, op.block_size, "scale", node)
    values = signed.reshape(k, n).astype(np.float64)
    if scheme == "int8_asym":
        values = values - _block_scales(args[3], k, n, op.block_size, "zp", node)
    return values * scale


@reference(DequantMatMul)
def ref_dequant_matmul(op: DequantMatMul, args, node):
    """``x @ dequant(W)`` in float64, f32 result."""
    weight = dequantize_weight(op, args, node)
    return (args[0].astype(np.float64) @ weight).astype(np.float32)


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


# -- quantised ---------------------------------------------------------------------------------
def gguf_dequantize(raw: np.ndarray, qtype: str, rows: int, cols: int) -> np.ndarray:
    """Rows of GGML blocks -> f32 [rows, cols], via gguf-py (the independent decoder)."""
    values = quants.dequantize(np.ascontiguousarray(raw, dtype=np.uint8), GGMLQuantizationType[qtype])
    return np.asarray(values, dtype=np.float32).reshape(rows, cols)


@reference(ops.DequantMatMulGguf)
def ref_dequant_matmul_gguf(op: ops.DequantMatMulGguf, args, node):
    x, w = args
    weight = gguf_dequantize(w, op.qtype, op.n, op.k)
    return (_f64(x) @ _f64(weight).T).astype(np.float32)


@reference(ops.DequantGroupedMatMul)
def ref_dequant_grouped(op: ops.DequantGroupedMatMul, args, node):
    x, w, idx = args
    out = np.zeros(node.shape, dtype=np.float64)
    experts = np.trunc(idx.astype(np.float64)).astype(np.int64)
    for e in np.unique(experts):
        if 0 <= e < w.shape[0]:
            rows = experts == e
            out[rows] = _f64(x[rows]) @ _f64(gguf_dequantize(w[e], op.qtype, op.n, op.k)).T
    return out.astype(np.float32)


@reference(ops.GatherGguf)
def ref_gather_gguf(op: ops.GatherGguf, args, node):
    table, idx = args
    rows = clamp_indices(idx, table.shape[0]).ravel()
    values = gguf_dequantize(table[rows], op.qtype, len(rows), op.k)
    return values.reshape(node.shape)


@reference(ops.FusedGgufMatMul)
def ref_fused_gguf_matmul(op: ops.FusedGgufMatMul, args, node):
    by_role = dict(zip(op.input_roles(), args))
    h = by_role["x"]
    if op.eps > 0:
        h = rms_norm(h, by_role["gamma"], None, op.eps)
    y = _f64(h) @ _f64(gguf_dequantize(by_role["w"], op.qtype, op.n, op.k)).T
    if op.swiglu:
        up = _f64(h) @ _f64(gguf_dequantize(by_role["w_up"], op.qtype, op.n, op.k)).T
        y = (y / (1.0 + np.exp(-y))) * up
    if op.has_residual:
        y = y + _f64(by_role["residual"])
    if op.rope is not None:  # the QKV block rounds to f32 first, as the unfused graph's GEMV output does
        return ref_rope_kv_append(op.rope, [y.astype(np.float32)] + [by_role[r] for r in ROPE_ROLES], node)
    return y.astype(np.float32)

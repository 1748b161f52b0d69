"""Generic group-wise quantised matmul (``DequantMatMul``) on the GPU.

``y = x @ dequant(W)`` with W [K, N] row-major (flat element ``e = kk*N + col``), packed as
int8 / int8_asym / int4 (scales, zero points per (K-block, column)), fp8 e4m3 / e5m2 (no scale)
or nvfp4 (E2M1 nibbles, e4m3 byte scales per 16 rows of K, one global f32 scale). The decode
mirrors ``rlxpy/ir/reference/quant.py``: ``value = (q - zero) * scale``. Up to
``GEMV_MAX_ROWS`` rows of x run a GEMV (one thread per 4 columns walks K block by block, in
dispatches of at most LOOP_BUDGET loop steps that add to what the previous ones stored: lavapipe);
more run a 64x64 tiled kernel that dequantises each 16x64 tile of W into workgroup memory.
"""

from __future__ import annotations

import math

from rlxpy.errors import GraphError, LimitError, UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.wgpu_backend.kernels.contract import accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering.reduce import chunks, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

_FIELDS = dict(m=U32, n=U32, k=U32, x=U32, w=U32, y=U32, scale=U32, zp=U32, block=U32, blocks=U32)
#: x f32; the weight, scales and zero points as the scheme stores them (checked in ``_validate``)
_DTYPES = accepts(DType.F32, out=DType.F32)
QUANT_GENERIC_GEMV = kernel("quant_generic_gemv", params("QuantGenericGemvParams", ("m",), **_FIELDS,
                                                         first=U32, last=U32, accumulate=U32),
                            dtypes=_DTYPES, workgroup=(64, 1, 1))
QUANT_GENERIC_TILED = kernel("quant_generic_tiled", params("QuantGenericTiledParams", ("m",), **_FIELDS),
                             dtypes=_DTYPES, workgroup=(16, 16, 1), shared_bytes=8192, extent_axis=1)
GEMV_MAX_ROWS = 8
TILE = 64
NVFP4_GROUP = 16  # nvfp4 scales cover 16 rows of K whatever block_size says
#: inputs each scheme reads (x, w_q, then scale, then zp / global scale)
NEEDS = {"int8": 3, "int8_asym": 4, "int4": 3, "fp8_e4m3": 2, "fp8_e5m2": 2, "nvfp4": 4}

#: scheme -> the include files of its decode (include/quant_generic_codes_<CODES>.wgsl and
#: quant_generic_scale_<SCALE>.wgsl), plus FP8's byte decoder: value = (codes - zero) * scale.
_SCHEMES = {
    "int8": {"CODES": "int8", "SCALE": "column"},
    "int8_asym": {"CODES": "int8", "SCALE": "zero"},
    "int4": {"CODES": "int4", "SCALE": "column"},
    "fp8_e4m3": {"CODES": "fp8", "SCALE": "none", "FP8": "fp8_e4m3"},
    "fp8_e5m2": {"CODES": "fp8", "SCALE": "none", "FP8": "fp8_e5m2"},
    "nvfp4": {"CODES": "fp4", "SCALE": "nvfp4"},
}
#: nvfp4's global scale is the first value of input 3: an f32 (or raw f32 bytes), or a half.
_GLOBAL_SCALE = {
    DType.F32: "bitcast<f32>(buf[p.zp])", DType.U8: "bitcast<f32>(buf[p.zp])",
    DType.I8: "bitcast<f32>(buf[p.zp])", DType.I32: "bitcast<f32>(buf[p.zp])",
    DType.U32: "bitcast<f32>(buf[p.zp])", DType.F16: "f16_to_f32(buf[p.zp] & 0xffffu)",
    DType.BF16: "bf16_to_f32(buf[p.zp] & 0xffffu)",
}


def decode_subs(scheme: str, global_dtype: DType | None) -> dict[str, str]:
    """The placeholders that pick a scheme's decode in quant_generic_gemv / quant_generic_tiled."""
    subs = dict(_SCHEMES[scheme])
    if global_dtype is not None:
        subs["GLOBAL_SCALE"] = _GLOBAL_SCALE[global_dtype]
    return subs


def _validate(node: Node, ins: list[Node]) -> tuple[int, int]:
    """Check inputs against the scheme; returns (scale rows per block, blocks along K)."""
    op: ops.DequantMatMul = node.op
    scheme, k, n = op.scheme, op.k, op.n
    if len(ins) < NEEDS[scheme]:
        names = ("x", "w_q", "scale", "zp")[:NEEDS[scheme]]
        raise GraphError(f"{where(node)}: scheme {scheme} takes inputs {', '.join(names)}, got {len(ins)}")
    w = ins[1]
    bits = 4 if scheme in ("int4", "nvfp4") else 8
    need_bytes = math.ceil(k * n * bits / 8)
    if w.numel * w.dtype.itemsize < need_bytes:
        raise GraphError(f"{where(node)}: {scheme} weight [{k}, {n}] needs {need_bytes} bytes, "
                         f"got {w.type} ({w.numel * w.dtype.itemsize} bytes)")
    if scheme.startswith("fp8"):
        return max(k, 1), 1
    if scheme == "nvfp4":
        blocks = math.ceil(k / NVFP4_GROUP)
        scale, glob = ins[2], ins[3]
        if scale.numel * scale.dtype.itemsize < blocks * n:
            raise GraphError(f"{where(node)}: nvfp4 scales need ceil(K/16)*N = {blocks * n} e4m3 bytes, "
                             f"got {scale.type}")
        if glob.dtype not in _GLOBAL_SCALE or glob.numel < 1:
            raise UnsupportedOpError(f"{where(node)}: nvfp4 global scale must be a non-empty f32/f16/bf16 "
                                     f"or raw-byte tensor, got {glob.type}")
        return NVFP4_GROUP, blocks
    if op.block_size <= 0:
        raise GraphError(f"{where(node)}: block_size must be positive, got {op.block_size}")
    blocks = math.ceil(k / op.block_size)
    for name, t in zip(("scale", "zp"), ins[2:NEEDS[scheme]]):
        if t.dtype is not DType.F32:
            raise UnsupportedOpError(f"{where(node)}: {scheme} {name} must be f32, got {t.type}")
        if t.numel != blocks * n:
            raise GraphError(f"{where(node)}: {name} must hold ceil(K/{op.block_size})*N = {blocks * n} "
                             f"values ([{blocks}, {n}]), got {t.type}")
    return op.block_size, blocks


@lowers(ops.DequantMatMul)
def lower_dequant_matmul(node: Node, ctx: LowerCtx) -> list[Step]:
    op: ops.DequantMatMul = node.op
    ins = ctx.inputs(node)
    block, blocks = _validate(node, ins)
    x, w = ins[0], ins[1]
    m = x.numel // op.k if op.k else math.prod(x.shape[:-1])
    if m == 0 or op.n == 0:
        return []
    if ctx.window_size >= 1 << 32:
        raise LimitError(f"{where(node)}: byte offsets of a {ctx.window_size / 2**30:.1f} GiB window "
                         f"do not fit the kernels' u32 addressing")
    scale = ins[2] if len(ins) > 2 and NEEDS[op.scheme] > 2 else None
    zp = ins[3] if len(ins) > 3 and NEEDS[op.scheme] > 3 else None
    # nvfp4 scales are bytes (byte offset); int scales and zero points are f32 words
    scale_off = 0 if scale is None else ctx.offset(scale) * (4 if op.scheme == "nvfp4" else 1)
    fields = dict(m=m, n=op.n, k=op.k, x=ctx.offset(x), w=ctx.offset(w) * 4, y=ctx.offset(node),
                  scale=scale_off, zp=0 if zp is None else ctx.offset(zp), block=block, blocks=blocks)
    source = decode_subs(op.scheme, zp.dtype if op.scheme == "nvfp4" else None)
    if m <= GEMV_MAX_ROWS:
        grid = ctx.grid_1d(math.ceil(op.n / 4), QUANT_GENERIC_GEMV.workgroup[0])
        pieces = chunks(blocks, steps_per_dispatch(node, block + 1, 16, "DequantMatMul"))
        return [ctx.dispatch(QUANT_GENERIC_GEMV, node, grid, {**source, "MR": m}, **fields, first=first,
                             last=first + count, accumulate=int(first > 0)) for first, count in pieces]
    grid = (math.ceil(op.n / TILE), math.ceil(m / TILE), 1)
    return [ctx.dispatch(QUANT_GENERIC_TILED, node, grid, source, **fields)]

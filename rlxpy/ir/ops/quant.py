"""Quantised matmuls and lookups: generic group-wise and GGUF block formats.

Documented in docs/ops.md#quant (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, TensorType, need
from rlxpy.ir.ops.rope import RopeKvAppend

#: The GGML types rlxpy reads (a GPU decoder, or a host step: host_ops/gguf_matmul.py).
GGUF_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K",
              "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "IQ4_XS")
#: GGML block geometry: type name -> (elements per block, bytes per block), from gguf-py (the one table;
#: the WGSL decoders get theirs from here too).
GGUF_BLOCKS: dict[str, tuple[int, int]] = {name: GGML_QUANT_SIZES[GGMLQuantizationType[name]]
                                           for name in GGUF_TYPES}


#: FusedGgufMatMul's extra inputs for its RopeKvAppend epilogue, in order.
ROPE_ROLES = ("k_cache", "v_cache", "cos", "sin", "pos")


def gguf_row_bytes(qtype: str, k: int) -> int:
    """Bytes of one row of ``k`` elements of GGML type ``qtype``."""
    need(qtype in GGUF_BLOCKS, f"unknown GGUF type {qtype!r}")
    block, size = GGUF_BLOCKS[qtype]
    need(k % block == 0, f"row size ({k}) is not a multiple of {qtype} block size ({block})")
    return k // block * size


@dataclass(frozen=True)
class DequantMatMulGguf(Op):
    """``y = x @ dequant(W)^T`` with W = [n rows of k elements] in GGML layout (u8 [n, row_bytes]),
    like ggml_mul_mat(W, x). Dequantisation matches gguf-py's ``quants.dequantize``."""

    qtype: str
    n: int
    k: int
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w = ins
        need(x.shape[-1] == self.k, f"x {x} last dim must be k={self.k}")
        need(
            w.dtype is DType.U8 and w.shape == (self.n, gguf_row_bytes(self.qtype, self.k)),
            f"{self.qtype} weight must be u8[{self.n}, {gguf_row_bytes(self.qtype, self.k)}], got {w}",
        )
        return TensorType(tuple(x.shape[:-1]) + (self.n,), DType.F32)


@dataclass(frozen=True)
class DequantGroupedMatMul(Op):
    """MoE with GGUF experts: ``y[i] = x[i] @ dequant(W[expert_idx[i]])^T``; W = u8 [E, n, row_bytes]."""

    qtype: str
    n: int
    k: int
    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x, w, idx = ins
        row = gguf_row_bytes(self.qtype, self.k)
        need(
            x.rank == 2 and x.shape[1] == self.k and idx.shape == (x.shape[0],),
            f"wants x [M, {self.k}], idx [M]; got {x}, {idx}",
        )
        need(
            w.dtype is DType.U8 and w.rank == 3 and w.shape[1:] == (self.n, row),
            f"{self.qtype} experts must be u8[E, {self.n}, {row}], got {w}",
        )
        return TensorType((x.shape[0], self.n), DType.F32)


@dataclass(frozen=True)
class GatherGguf(Op):
    """Embedding lookup on a GGUF table u8 [rows, row_bytes]: dequantise only the rows named by
    the indices (clamped into range). Output idx.shape + [k], f32."""

    qtype: str
    k: int
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        table, idx = ins
        row = gguf_row_bytes(self.qtype, self.k)
        need(
            table.dtype is DType.U8 and table.rank == 2 and table.shape[1] == row,
            f"{self.qtype} table must be u8[rows, {row}], got {table}",
        )
        need(idx.dtype in (DType.I32, DType.U32, DType.F32), f"indices must be i32/u32/f32, got {idx}")
        return TensorType(tuple(idx.shape) + (self.k,), DType.F32)


#: Generic (non-GGUF) schemes: name -> bits per weight element.
DEQUANT_SCHEMES = {"int8": 8, "int8_asym": 8, "int4": 4, "fp8_e4m3": 8, "fp8_e5m2": 8, "nvfp4": 4}


@dataclass(frozen=True)
class DequantMatMul(Op):
    """``x @ dequant(W)`` with W [K, N] row-major, packed per ``scheme``,
    scales per (K-block of ``block_size``, column). Inputs x, w_q (u8 bytes), scale, zp."""

    scheme: str
    k: int
    n: int
    block_size: int = 32
    arity = (2, 4)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        x = ins[0]
        need(self.scheme in DEQUANT_SCHEMES, f"unknown scheme {self.scheme!r}")
        need(x.shape[-1] == self.k, f"x {x} last dim must be k={self.k}")
        return TensorType(tuple(x.shape[:-1]) + (self.n,), DType.F32)


@dataclass(frozen=True)
class FusedGgufMatMul(Op):
    """A decode-path GEMV with its neighbours folded in (made by ir/passes/patterns.py):

    ``h = rms_norm(x) * gamma`` when ``eps > 0`` (else ``h = x``);
    ``y = h @ dequant(W)^T``, or ``silu(h @ W^T) * (h @ W_up^T)`` when ``swiglu``;
    ``y += residual`` when ``has_residual``;
    when ``head_dim > 0``, ``y`` is a fused QKV row block and RopeKvAppend follows: q and k are
    rotated, k and v appended IN PLACE to the caches at row pos, and the output is the rotated q
    [..., q_width] (the fields mean what RopeKvAppend's do).
    Inputs in order: x, w, [w_up], [gamma], [residual], [k_cache, v_cache, cos, sin, pos].
    Same math as the unfused ops."""

    qtype: str
    n: int
    k: int
    eps: float = 0.0
    swiglu: bool = False
    has_residual: bool = False
    head_dim: int = 0  # > 0: the RopeKvAppend epilogue
    q_width: int = 0
    kv_width: int = 0
    n_rot: int = 0
    interleaved: bool = False
    arity = (2, 10)

    @property
    def rope(self) -> RopeKvAppend | None:
        """The RopeKvAppend folded into the epilogue, if any."""
        if not self.head_dim:
            return None
        return RopeKvAppend(self.head_dim, self.q_width, self.kv_width, self.n_rot, self.interleaved)

    def input_roles(self) -> list[str]:
        roles = ["x", "w"] + (["w_up"] if self.swiglu else []) + (["gamma"] if self.eps > 0 else [])
        roles += ["residual"] if self.has_residual else []
        return roles + (list(ROPE_ROLES) if self.head_dim else [])

    def mutated_inputs(self) -> tuple[int, ...]:
        """The KV caches its RopeKvAppend epilogue appends to."""
        roles = self.input_roles()
        return (roles.index("k_cache"), roles.index("v_cache")) if self.head_dim else ()

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        roles = self.input_roles()
        need(len(ins) == len(roles), f"takes inputs {roles}, got {len(ins)}")
        by_role = dict(zip(roles, ins))
        x = by_role["x"]
        need(x.shape[-1] == self.k and x.dtype is DType.F32, f"x {x} must be f32[..., {self.k}]")
        row = gguf_row_bytes(self.qtype, self.k)
        for role in ("w", "w_up"):
            if role in by_role:
                need(
                    by_role[role].dtype is DType.U8 and by_role[role].shape == (self.n, row),
                    f"{role} must be u8[{self.n}, {row}], got {by_role[role]}",
                )
        if "gamma" in by_role:
            need(by_role["gamma"].shape == (self.k,), f"gamma must be [{self.k}], got {by_role['gamma']}")
        out = tuple(x.shape[:-1]) + (self.n,)
        if "residual" in by_role:
            need(
                tuple(by_role["residual"].shape) == out,
                f"residual must be {list(out)}, got {by_role['residual']}",
            )
        rope = self.rope
        if rope is None:
            return TensorType(out, DType.F32)
        need(not self.swiglu and not self.has_residual,
             "the RopeKvAppend epilogue excludes SwiGLU and residual")
        need(x.rank == 2, f"with the RopeKvAppend epilogue x must be [S, {self.k}], got {x}")
        qkv = TensorType(out, DType.F32)
        return rope.infer([qkv] + [by_role[r] for r in ROPE_ROLES])

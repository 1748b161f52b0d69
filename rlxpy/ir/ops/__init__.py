"""The closed op set of the IR. ``ALL_OPS`` lists every op class; ``OP_TYPES`` maps names."""

from __future__ import annotations

from rlxpy.ir.ops import (  # noqa: F401  (registration)
    attention,
    basic,
    composite,  # noqa: F401  (expanded by the unfuse pass)
    core,
    extra,  # noqa: F401  (secondary families: conv, sequence, signal, backward)
    linalg,
    quant,
)
from rlxpy.ir.ops.attention import Attention, CacheWrite, Rope, RopeKvAppend
from rlxpy.ir.ops.basic import (
    Activation,
    Binary,
    Cast,
    Compare,
    Concat,
    Constant,
    Copy,
    Expand,
    Gather,
    Input,
    Narrow,
    Param,
    Reshape,
    ScatterAdd,
    Transpose,
    Where,
)
from rlxpy.ir.ops.core import (
    ENUMS,
    OP_TYPES,
    ActKind,
    BinaryOp,
    CmpOp,
    FftNorm,
    MaskKind,
    Op,
    ReduceOp,
    TensorType,
)
from rlxpy.ir.ops.linalg import (
    Argmax,
    Cumsum,
    FusedMatMulBiasAct,
    FusedResidualLN,
    FusedResidualRmsNorm,
    GroupedMatMul,
    LayerNorm,
    MatMul,
    Reduce,
    RmsNorm,
    Sample,
    Softmax,
    TopK,
)
from rlxpy.ir.ops.quant import (
    GGUF_BLOCKS, DequantGroupedMatMul, DequantMatMul, DequantMatMulGguf, FusedGgufMatMul, GatherGguf,
)

ALL_OPS: tuple[type[Op], ...] = tuple(OP_TYPES.values())
LEAF_OPS = (Input, Param, Constant)
VIEW_OPS = (Reshape,)

__all__ = [
    "ALL_OPS", "CacheWrite", "ENUMS", "GGUF_BLOCKS", "LEAF_OPS", "OP_TYPES", "VIEW_OPS", "ActKind", "Activation",
    "Argmax", "Attention", "Binary", "BinaryOp", "Cast", "CmpOp", "Compare", "Concat", "Constant", "Copy",
    "Cumsum", "DequantGroupedMatMul", "DequantMatMul", "DequantMatMulGguf", "Expand", "FftNorm",
    "FusedGgufMatMul", "FusedMatMulBiasAct", "FusedResidualLN", "FusedResidualRmsNorm", "Gather", "GatherGguf",
    "GroupedMatMul", "Input", "LayerNorm", "MaskKind", "MatMul", "Narrow", "Op", "Param", "Reduce",
    "ReduceOp", "Reshape", "RmsNorm", "Rope", "RopeKvAppend", "Sample", "ScatterAdd", "Softmax", "TensorType", "TopK",
    "Transpose", "Where",
]

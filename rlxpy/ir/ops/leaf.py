"""Leaf family: graph inputs, parameters and constants. They have no reference
function and no lowerer: run_reference and the executable bind their values directly.

Documented in docs/ops.md#leaf (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, TensorType, need
from rlxpy.ir.shape import Shape, format_shape, is_static


@dataclass(frozen=True)
class Input(Op):
    """A graph input, uploaded by name on each run (skipped when its bytes did not change)."""

    name: str
    shape: Shape
    dtype: DType = DType.F32
    arity = (0, 0)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return TensorType(self.shape, self.dtype)


@dataclass(frozen=True)
class Param(Op):
    """A weight, set once with set_param / set_param_bytes; never shares arena space."""

    name: str
    shape: Shape
    dtype: DType = DType.F32
    arity = (0, 0)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        return TensorType(self.shape, self.dtype)


@dataclass(frozen=True, eq=False)
class Constant(Op):
    """Bytes fixed at build time, in the arena storage format of ``dtype``."""

    data: bytes
    shape: Shape
    dtype: DType = DType.F32
    arity = (0, 0)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        need(is_static(self.shape), f"constant shape {format_shape(self.shape)} must be static")
        size = math.prod(self.shape) * self.dtype.itemsize  # type: ignore[arg-type]
        need(len(self.data) == size, f"constant has {len(self.data)} bytes, shape needs {size}")
        return TensorType(self.shape, self.dtype)

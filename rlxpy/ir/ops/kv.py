"""KV family: writing rows into a persistent KV cache.

Documented in docs/ops.md#kv (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, TensorType, need


@dataclass(frozen=True)
class CacheWrite(Op):
    """Write ``rows`` [S, ...] into ``cache`` [L, ...] at row ``pos`` (an i32[1] tensor read at run
    time) IN PLACE: the output aliases the cache, so a Param cache keeps the rows across runs (a
    KV cache). Rows that would land at or past L are dropped."""

    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        cache, rows, pos = ins
        need(cache.rank >= 1 and rows.rank == cache.rank and tuple(rows.shape[1:]) == tuple(cache.shape[1:]),
             f"rows {rows} must be [S, {', '.join(str(d) for d in cache.shape[1:])}] for cache {cache}")
        need(rows.dtype == cache.dtype, f"rows {rows} and cache {cache} dtypes differ")
        need(pos.shape == (1,) and pos.dtype in (DType.I32, DType.U32), f"pos must be i32[1], got {pos}")
        return cache

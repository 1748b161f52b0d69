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
    KV cache). Rows that would land at or past L are dropped.

    Batched decode: pos i32[S] (S > 1) writes row s into slot s of the cache, whose L rows are S
    slots of L/S rows: at row s * (L/S) + pos[s], dropped when pos[s] >= L/S."""

    arity = (3, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        cache, rows, pos = ins
        need(cache.rank >= 1 and rows.rank == cache.rank and tuple(rows.shape[1:]) == tuple(cache.shape[1:]),
             f"rows {rows} must be [S, {', '.join(str(d) for d in cache.shape[1:])}] for cache {cache}")
        need(rows.dtype == cache.dtype, f"rows {rows} and cache {cache} dtypes differ")
        rows_n = rows.shape[0]
        need(pos.shape in ((1,), (rows_n,)) and pos.dtype in (DType.I32, DType.U32),
             f"pos must be i32[1] or one per row i32[{rows_n}], got {pos}")
        if pos.shape == (rows_n,) and rows_n != 1:
            need(isinstance(rows_n, int) and isinstance(cache.shape[0], int) and cache.shape[0] % rows_n == 0,
                 f"per-row positions: the cache's {cache.shape[0]} rows are not {rows_n} equal slots")
        return cache

"""Shape family: Transpose, Narrow, Expand, Concat, Gather, ScatterAdd (Reshape is a view: no step).

Transpose, Narrow, Expand and each Concat stripe are one strided copy (``shape_strided``): an index
space of at most 6 dims (after merging dims that are contiguous on both sides) with a source and a
destination stride per dim, passed as separate u32 fields of the uniform record. Pure data
movement is dtype-blind: 4- and 8-byte elements are copied word by word, 1- and 2-byte elements
are packed so that every destination word is written by one thread only (no write races).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.errors import GraphError, UnsupportedOpError, where
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType
from rlxpy.ir.graph import Node
from rlxpy.ir.shape import normalize_axis
from rlxpy.wgpu_backend.kernels.contract import ANY, WORDS, accepts
from rlxpy.wgpu_backend.kernels.params import U32, kernel, params
from rlxpy.wgpu_backend.lowering import shape_resize  # noqa: F401  (Resize)
from rlxpy.wgpu_backend.lowering.reduce import chunks, steps_per_dispatch
from rlxpy.wgpu_backend.schedule import LowerCtx, Step, lowers

MAX_RANK = 6
# scalars, then dims d0..d5, source strides s0..s5, destination strides t0..t5 (outermost first)
_STRIDED_FIELDS = {
    **{name: U32 for name in ("n", "words", "w0", "x", "y", "elem_bytes", "src_base", "dst_base",
                              "keep_axis", "keep_lo", "keep_hi")},
    **{f"{prefix}{k}": U32 for prefix in ("d", "s", "t") for k in range(MAX_RANK)},
}
# Active extent: a strided copy may map output rows to any input rows (concat on axis 0, a transpose
# that moves the row axis) and every scatter row may receive any update, so those two run in full;
# the first rows of a gather or a cast need only the first indices / source rows.
_INDICES = (DType.I32, DType.U32, DType.F32, DType.I64)  # index dtypes with a row_of (below)
SHAPE_STRIDED = kernel("shape_strided", params("ShapeStridedParams", **_STRIDED_FIELDS), dtypes=accepts())
SHAPE_GATHER = kernel("shape_gather", params("ShapeGatherParams", ("n", "words"), n=U32, words=U32, x=U32,
                                              idx=U32, y=U32, elem_bytes=U32, inner=U32, count=U32, dim=U32),
                      dtypes=accepts(ANY, _INDICES), extent_axis=0)
SHAPE_SCATTER_ADD = kernel("shape_scatter_add", params("ShapeScatterAddParams", width=U32, out_dim=U32,
                                                        zero_start=U32, zero_end=U32, start=U32, end=U32,
                                                        x=U32, idx=U32, y=U32),
                           dtypes=accepts(WORDS, _INDICES, out=WORDS))

#: Largest element index the kernels address (0xffffffff is their "skip" marker).
MAX_ELEMENTS = (1 << 32) - 2


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """Row-major strides in elements: the last dim has stride 1."""
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return strides


@dataclass(frozen=True)
class Axis:
    """One dim of a strided copy: coordinates run over [0, size); those outside [lo, hi) are not
    written (Concat's stripe, in the packed form)."""

    size: int
    src: int
    dst: int
    lo: int = 0
    hi: int = -1  # -1: size

    @property
    def top(self) -> int:
        return self.size if self.hi < 0 else self.hi

    @property
    def full(self) -> bool:
        return self.lo == 0 and self.top == self.size


def coalesce(axes: Sequence[Axis]) -> list[Axis]:
    """Drop size-1 dims and merge neighbours that are contiguous on both sides (outer stride =
    inner stride * inner size), so a rank-8 transpose that only swaps two blocks fits in 6 dims."""
    merged: list[Axis] = []
    for axis in axes:
        if axis.size == 1:
            continue
        if merged:
            outer = merged[-1]
            if (axis.full and outer.src == axis.src * axis.size and outer.dst == axis.dst * axis.size):
                size, lo, hi = outer.size * axis.size, outer.lo * axis.size, outer.top * axis.size
                merged[-1] = Axis(size, axis.src, axis.dst, lo, -1 if (lo, hi) == (0, size) else hi)
                continue
        merged.append(axis)
    return merged


def _check_indexing(node: Node, *counts: int) -> None:
    if max(counts) > MAX_ELEMENTS:
        raise UnsupportedOpError(f"{where(node)}: {max(counts)} elements exceed the kernels' u32 indexing")


def _element_bytes(node: Node, dtype: DType) -> int:
    size = dtype.itemsize
    if size not in (1, 2, 4, 8):  # every current dtype is one of these; a future one must say how
        raise UnsupportedOpError(f"{where(node)}: {dtype} elements of {size} bytes are not lowered")
    return size


def strided_step(node: Node, ctx: LowerCtx, x: Node, axes: Sequence[Axis], src_base: int = 0,
                 dst_base: int = 0, span: tuple[int, int] | None = None) -> Step:
    """One ``shape_strided`` dispatch copying ``x`` into ``node`` over the index space ``axes``.

    Packed (1/2-byte) elements need the destination contiguous over the index space (the
    thread of a destination word finds its elements); ``span`` = (first, end) destination
    words to visit, default the words covering [dst_base, dst_base + numel)."""
    elem_bytes = _element_bytes(node, node.dtype)
    n = math.prod(a.size for a in axes)
    if elem_bytes < 4:
        sizes = [a.size for a in axes]
        expected = [s for s, d in zip(contiguous_strides(sizes), sizes) if d > 1]
        assert [a.dst for a in axes if a.size > 1] == expected, "packed copies need a contiguous destination"
    merged = coalesce(axes)
    if len(merged) > MAX_RANK:
        raise UnsupportedOpError(f"{where(node)}: a strided copy of {len(merged)} non-mergeable dims "
                                 f"(shape {list(node.shape)}); the kernel handles at most {MAX_RANK}")
    _check_indexing(node, n, node.numel, x.numel)
    padded = [Axis(1, 0, 0)] * (MAX_RANK - len(merged)) + merged
    partial = [k for k, a in enumerate(padded) if not a.full]
    keep_axis = partial[0] if partial else 0
    if elem_bytes >= 4:
        words, first = n * (elem_bytes // 4), 0
    else:
        per = 4 // elem_bytes
        first, end = span if span is not None else (dst_base // per, -(-(dst_base + n) // per))
        words = end - first
    fields = {f"d{k}": a.size for k, a in enumerate(padded)}
    fields.update({f"s{k}": a.src for k, a in enumerate(padded)})
    fields.update({f"t{k}": a.dst for k, a in enumerate(padded)})
    return ctx.dispatch(SHAPE_STRIDED, node, ctx.grid_1d(words), n=n, words=words, w0=first,
                        x=ctx.offset(x), y=ctx.offset(node), elem_bytes=elem_bytes,
                        src_base=src_base % (1 << 32), dst_base=dst_base, keep_axis=keep_axis,
                        keep_lo=padded[keep_axis].lo, keep_hi=padded[keep_axis].top, **fields)


# -- Transpose, Narrow, Expand ----------------------------------------------------------------
@lowers(ops.Transpose)
def lower_transpose(node: Node, ctx: LowerCtx) -> list[Step]:
    """``numpy.transpose(x, perm)``: output dim k reads input dim perm[k] at its input stride."""
    (x,) = ctx.inputs(node)
    if node.numel == 0:
        return []
    src = contiguous_strides(x.shape)
    dst = contiguous_strides(node.shape)
    axes = [Axis(x.shape[p], src[p], dst[k]) for k, p in enumerate(node.op.perm)]
    return [strided_step(node, ctx, x, axes)]


@lowers(ops.Narrow)
def lower_narrow(node: Node, ctx: LowerCtx) -> list[Step]:
    """``x[..., start:start+length, ...]``: the input's strides from element start * stride(axis)."""
    (x,) = ctx.inputs(node)
    if node.numel == 0:
        return []
    axis = normalize_axis(node.op.axis, x.rank)
    src = contiguous_strides(x.shape)
    dst = contiguous_strides(node.shape)
    axes = [Axis(size, src[k], dst[k]) for k, size in enumerate(node.shape)]
    return [strided_step(node, ctx, x, axes, src_base=node.op.start * src[axis])]


@lowers(ops.Expand)
def lower_expand(node: Node, ctx: LowerCtx) -> list[Step]:
    """``numpy.broadcast_to`` after left-padding x with 1s: broadcast dims read at stride 0."""
    (x,) = ctx.inputs(node)
    if node.numel == 0:
        return []
    padded = (1,) * (node.rank - x.rank) + tuple(x.shape)
    src = contiguous_strides(padded)
    dst = contiguous_strides(node.shape)
    axes = [Axis(size, src[k] if padded[k] == size else 0, dst[k]) for k, size in enumerate(node.shape)]
    return [strided_step(node, ctx, x, axes)]


# -- Concat -----------------------------------------------------------------------------------
@lowers(ops.Concat)
def lower_concat(node: Node, ctx: LowerCtx) -> list[Step]:
    """``numpy.concatenate(xs, axis)``: one step per non-empty input, writing its stripe.

    Word-sized elements walk the input and scatter into the stripe. Packed 1/2-byte elements
    walk the destination words the stripe touches and fill only the stripe's elements, so a
    word shared with the neighbouring stripe keeps the neighbour's half (steps run in order)."""
    axis = normalize_axis(node.op.axis, node.rank)
    out_strides = contiguous_strides(node.shape)
    elem_bytes = _element_bytes(node, node.dtype)
    outer = math.prod(node.shape[:axis])
    inner = out_strides[axis]
    steps, start = [], 0
    for x in ctx.inputs(node):
        length = x.shape[axis]
        if x.numel > 0:
            in_strides = contiguous_strides(x.shape)
            if elem_bytes >= 4:
                axes = [Axis(size, in_strides[k], out_strides[k]) for k, size in enumerate(x.shape)]
                steps.append(strided_step(node, ctx, x, axes, dst_base=start * inner))
            else:
                per = 4 // elem_bytes
                axes = [Axis(size, in_strides[k], out_strides[k],
                             *((start, start + length) if k == axis else (0, -1)))
                        for k, size in enumerate(node.shape)]
                first = start * inner
                last = (outer - 1) * node.shape[axis] * inner + (start + length) * inner - 1
                steps.append(strided_step(node, ctx, x, axes, src_base=-start * in_strides[axis],
                                          span=(first // per, last // per + 1)))
        start += length
    return steps


# -- Gather, ScatterAdd -----------------------------------------------------------------------
#: Index dtypes of shape_gather / shape_scatter_add (their ``row_<dtype>`` functions): truncated,
#: then clamped into [0, dim - 1] (gather, NaN -> 0) or skipped outside [0, out_dim) (scatter).
_INDEX_TYPES = {DType.I32: "i32", DType.U32: "u32", DType.F32: "f32", DType.I64: "i64"}

_SCATTER_ADD = {
    DType.F32: "bitcast<u32>(bitcast<f32>(acc) + bitcast<f32>(v))",
    DType.I32: "acc + v",  # two's complement: the same bits as an i32 add (wrapping, like numpy)
    DType.U32: "acc + v",
    DType.BOOL: "select(0u, 1u, acc != 0u || v != 0u)",  # numpy.add.at on bool is a logical or
}


def _index_dtype(node: Node, idx: Node) -> str:
    if idx.dtype not in _INDEX_TYPES:
        raise UnsupportedOpError(f"{where(node)}: indices of dtype {idx.dtype} are not lowered "
                                 f"(i32/u32/f32/i64)")
    return _INDEX_TYPES[idx.dtype]


@lowers(ops.Gather)
def lower_gather(node: Node, ctx: LowerCtx) -> list[Step]:
    """``numpy.take(table, clip(trunc(idx), 0, dim-1), axis)`` (torch.index_select / embedding);
    out[o, k, t] = table[o, row(idx_k), t] with idx flattened. A NaN f32 index reads row 0."""
    table, idx = ctx.inputs(node)
    axis = normalize_axis(node.op.axis, table.rank)
    if node.numel == 0:
        return []
    dim = table.shape[axis]
    if dim == 0:
        raise GraphError(f"{where(node)}: gather from axis {axis} of {list(table.shape)}, which is empty")
    elem_bytes = _element_bytes(node, node.dtype)
    _check_indexing(node, node.numel, table.numel)
    words = node.numel * elem_bytes // 4 if elem_bytes >= 4 else -(-node.numel * elem_bytes // 4)
    subs = {"INDEX": _index_dtype(node, idx)}
    return [ctx.dispatch(SHAPE_GATHER, node, ctx.grid_1d(words), subs, n=node.numel, words=words,
                         x=ctx.offset(table), idx=ctx.offset(idx), y=ctx.offset(node), elem_bytes=elem_bytes,
                         inner=math.prod(table.shape[axis + 1:]), count=idx.numel, dim=dim)]


@lowers(ops.ScatterAdd)
def lower_scatter_add(node: Node, ctx: LowerCtx) -> list[Step]:
    """``out = zeros; numpy.add.at(out, trunc(idx), updates)`` (torch.index_add_ on a zero tensor)
    with out-of-range rows skipped. Deterministic: each thread owns one column and adds in order.
    A thread walks out_dim rows to zero, then every update: that walk is cut into dispatches of at
    most LOOP_BUDGET steps (lowering/reduce.py), run in order."""
    updates, idx = ctx.inputs(node)
    if node.dtype not in _SCATTER_ADD:
        raise UnsupportedOpError(f"{where(node)}: scatter_add of {node.dtype} is not lowered "
                                 f"(f32/i32/u32/bool)")
    width = math.prod(node.shape[1:])
    if node.numel == 0:
        return []
    _check_indexing(node, node.numel, updates.numel, node.op.out_dim)
    subs = {"INDEX": _index_dtype(node, idx), "ADD": _SCATTER_ADD[node.dtype]}
    out_dim = node.op.out_dim
    steps = []
    for first, n in chunks(out_dim + idx.numel, steps_per_dispatch(node, 1, 16, "ScatterAdd")):
        last = first + n  # steps [0, out_dim) zero rows, the rest add updates
        steps.append(ctx.dispatch(SHAPE_SCATTER_ADD, node, ctx.grid_1d(width), subs, width=width,
                                  out_dim=out_dim, zero_start=min(first, out_dim),
                                  zero_end=min(last, out_dim), start=max(first, out_dim) - out_dim,
                                  end=max(last, out_dim) - out_dim, x=ctx.offset(updates),
                                  idx=ctx.offset(idx), y=ctx.offset(node)))
    return steps


__all__ = ["Axis", "coalesce", "contiguous_strides", "strided_step"]

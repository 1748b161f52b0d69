"""Shape family: views and data movement: reshape, transpose, narrow, concat,
expand, gather, scatter-add and resize (nearest / linear resampling of the trailing dims).

Documented in docs/ops.md#shape (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, ResizeCoord, ResizeMode, TensorType, check_axis, need
from rlxpy.ir.shape import Dim, Shape, Sym, format_shape, is_static


@dataclass(frozen=True)
class Reshape(Op):
    """A view with a new shape (one -1 allowed); aliases its input, no step."""

    new_shape: Shape

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        unknown = [i for i, d in enumerate(self.new_shape) if d == -1]
        need(len(unknown) <= 1, f"reshape to {format_shape(self.new_shape)}: at most one -1")
        if not is_static(x.shape) or any(isinstance(d, Sym) for d in self.new_shape):
            need(not unknown, "reshape with -1 needs static shapes; name the symbolic dim instead")
            return TensorType(self.new_shape, x.dtype)
        total = math.prod(x.shape)  # type: ignore[arg-type]
        known = math.prod(d for d in self.new_shape if d != -1)  # type: ignore[misc]
        shape = list(self.new_shape)
        if unknown:
            need(known > 0 and total % known == 0,
                 f"cannot reshape {format_shape(x.shape)} to {format_shape(self.new_shape)}")
            shape[unknown[0]] = total // known
        need(math.prod(shape) == total,  # type: ignore[arg-type]
             f"cannot reshape {format_shape(x.shape)} ({total} elements) to {format_shape(self.new_shape)}")
        return TensorType(tuple(shape), x.dtype)


@dataclass(frozen=True)
class Transpose(Op):
    """``numpy.transpose(x, perm)``."""

    perm: tuple[int, ...]

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(sorted(self.perm) == list(range(x.rank)),
             f"perm {self.perm} is not a permutation of rank {x.rank}")
        return TensorType(tuple(x.shape[p] for p in self.perm), x.dtype)


@dataclass(frozen=True)
class Narrow(Op):
    """``x[..., start:start+length, ...]`` along ``axis``."""

    axis: int
    start: int
    length: int

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        axis = check_axis(self.axis, x.rank)
        dim = x.shape[axis]
        need(self.start >= 0 and self.length >= 0, f"narrow start {self.start}, length {self.length}")
        need(isinstance(dim, Sym) or self.start + self.length <= dim,
             f"narrow {self.start}:{self.start + self.length} exceeds axis {axis} of {format_shape(x.shape)}")
        shape = list(x.shape)
        shape[axis] = self.length
        return TensorType(tuple(shape), x.dtype)


@dataclass(frozen=True)
class Concat(Op):
    """``numpy.concatenate(xs, axis)``."""

    axis: int
    arity = (1, None)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        first = ins[0]
        axis = check_axis(self.axis, first.rank)
        total: Dim = 0
        for t in ins:
            same = all(a == b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis)
            need(t.rank == first.rank and same and t.dtype == first.dtype,
                 "concat inputs differ outside axis " f"{axis}: " + ", ".join(str(t) for t in ins))
            dim = t.shape[axis]
            need(isinstance(dim, int) and isinstance(total, int), "concat axis must be static")
            total = total + dim  # type: ignore[operator]
        shape = list(first.shape)
        shape[axis] = total
        return TensorType(tuple(shape), first.dtype)


@dataclass(frozen=True)
class Expand(Op):
    """``numpy.broadcast_to`` after left-padding x with 1s; only size-1 dims broadcast."""

    shape: Shape

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.rank <= len(self.shape),
             f"cannot expand {format_shape(x.shape)} to {format_shape(self.shape)}")
        padded = (1,) * (len(self.shape) - x.rank) + tuple(x.shape)
        for have, want in zip(padded, self.shape):
            need(have in (1, want), f"cannot expand {format_shape(x.shape)} to {format_shape(self.shape)}")
        return TensorType(tuple(self.shape), x.dtype)


@dataclass(frozen=True)
class Gather(Op):
    """``numpy.take(table, clip(indices), axis)``: out shape = table[:axis] + idx + table[axis+1:].
    Indices are clamped into [0, dim-1] and fractions truncate."""

    axis: int = 0
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        table, idx = ins
        axis = check_axis(self.axis, table.rank)
        need(idx.dtype in (DType.I32, DType.I64, DType.U32, DType.F32),
             f"gather indices must be i32/u32/i64/f32, got {idx}")
        return TensorType(table.shape[:axis] + idx.shape + table.shape[axis + 1:], table.dtype)


@dataclass(frozen=True)
class ScatterAdd(Op):
    """``out = zeros([out_dim, *T]); numpy.add.at(out, idx, updates)``; rows outside are skipped."""

    out_dim: int
    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        updates, idx = ins
        need(idx.rank == 1 and updates.rank >= 1 and idx.shape[0] == updates.shape[0],
             f"scatter_add wants updates [U, ...] and indices [U], got {updates} and {idx}")
        return TensorType((self.out_dim,) + tuple(updates.shape[1:]), updates.dtype)


#: Resize resamples at most this many trailing dims (linear, trilinear).
RESIZE_MAX_DIMS = 3


@dataclass(frozen=True)
class Resize(Op):
    """Resampling of the trailing ``len(sizes)`` dims (1 to 3) of a float x to ``sizes``; the
    leading dims (batch, channels) are kept: [N, C, H, W] -> [N, C, *sizes] for 2 sizes. Output
    index o of each resized dim reads source coordinate ``src`` (``coord``, a ResizeCoord, computed
    in f32 from ``steps``: input units per output unit per resized dim, empty = in / out), sampled
    as ``mode`` says (ResizeMode: a nearest rounding, or linear). torch's interpolate(nearest) is
    NEAREST_FLOOR + ASYMMETRIC with steps 1/scale_factor (or in/out), "nearest-exact" is
    NEAREST_ROUND_PREFER_CEIL + HALF_PIXEL; (bi/tri)linear is LINEAR + HALF_PIXEL
    (align_corners=False) or ALIGN_CORNERS; ONNX's Resize maps its attributes one to one."""

    sizes: tuple[int, ...]
    mode: ResizeMode = ResizeMode.NEAREST_FLOOR
    coord: ResizeCoord = ResizeCoord.ASYMMETRIC
    steps: tuple[float, ...] = ()

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        count = len(self.sizes)
        need(1 <= count <= RESIZE_MAX_DIMS, f"resize takes 1 to {RESIZE_MAX_DIMS} sizes, got {self.sizes}")
        need(x.rank >= count, f"resize of {count} dims needs rank >= {count}, got {x}")
        need(x.dtype.is_float, f"resize needs a float input, got {x}")
        need(all(isinstance(d, int) and d >= 1 for d in self.sizes),
             f"resize sizes {self.sizes} must be ints >= 1")
        need(not self.steps or len(self.steps) == count and all(v > 0 for v in self.steps),
             f"resize steps {self.steps} must be {count} positive numbers")
        spatial = x.shape[x.rank - count:]
        need(all(isinstance(d, int) and d >= 1 for d in spatial),
             f"resize needs static, non-empty resized dims, got {x}")
        return TensorType(tuple(x.shape[:x.rank - count]) + tuple(self.sizes), x.dtype)

    def step(self, dim: int, size_in: int) -> float:
        """Input units per output unit of resized dim ``dim`` (ALIGN_CORNERS's own ratio included)."""
        out = self.sizes[dim]
        if self.coord is ResizeCoord.ALIGN_CORNERS:
            return (size_in - 1) / (out - 1) if out > 1 else 0.0
        return self.steps[dim] if self.steps else size_in / out

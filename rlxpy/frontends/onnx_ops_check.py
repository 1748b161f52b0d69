"""Argument checks shared by the ONNX folds and emitters: axes, permutations, integer lists, shapes
that broadcast, reshape targets and a size limit on folded values. Each raises a ModelError that
starts with ``where`` (the node: ``name (OpType)``), so a malformed model is refused with the node
and the argument named, before numpy or the builder sees the values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlxpy.errors import ModelError

#: Elements a value folded at import time may have (ConstantOfShape, Expand, Range, ...).
MAX_FOLD_ELEMENTS = 1 << 24


def axis_of(where: str, axis: Any, rank: int, what: str = "axis", inclusive: bool = False) -> int:
    """``axis`` in [-rank, rank) (``inclusive``: [-rank, rank]) as a non-negative index."""
    top = rank + 1 if inclusive else rank
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -top <= axis < top:
        raise ModelError(f"{where}: {what} {axis!r} is out of range for a rank-{rank} input")
    return int(axis) % top


def axes_of(where: str, axes: Sequence[Any], rank: int, what: str = "axes") -> list[int]:
    """Distinct axes, each in range, as non-negative indices (in the given order)."""
    out = [axis_of(where, a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ModelError(f"{where}: {what} {list(axes)} repeat an axis")
    return out


def int_list(where: str, value: Any, what: str) -> list[int]:
    """A 0-D or 1-D integer tensor (or a list of ints) as Python ints."""
    array = np.asarray(value)
    if array.ndim > 1 or array.size and array.dtype.kind not in "iu":
        raise ModelError(f"{where}: {what} must be a 1-D integer tensor, not {array.dtype} "
                         f"{list(array.shape)}")
    return [int(v) for v in array.reshape(-1)]


def scalar_of(where: str, value: Any, what: str) -> Any:
    """The one element of a one-element tensor."""
    array = np.asarray(value)
    if array.size != 1:
        raise ModelError(f"{where}: {what} must have one element, it has shape {list(array.shape)}")
    return array.reshape(-1)[0]


def permutation(where: str, perm: Sequence[Any], rank: int) -> list[int]:
    values = [int(p) for p in perm]
    if sorted(values) != list(range(rank)):
        raise ModelError(f"{where}: perm {values} is not a permutation of the {rank} axes")
    return values


def broadcast(where: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy's broadcast of ``shapes``, or a ModelError naming them."""
    rank = max((len(s) for s in shapes), default=0)
    if any(int(d) < 0 for s in shapes for d in s):
        raise ModelError(f"{where}: shapes {[list(s) for s in shapes]} have a negative dim")
    out = []
    for axis in range(rank):
        sizes = {int(s[axis - rank + len(s)]) for s in shapes if axis - rank + len(s) >= 0}
        wide = sizes - {1}
        if len(wide) > 1:
            raise ModelError(f"{where}: shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(wide.pop() if wide else 1)
    return tuple(out)


def fold_size(where: str, shape: Sequence[int], what: str = "the result") -> tuple[int, ...]:
    """``shape`` checked to be non-negative and small enough to compute at import time."""
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise ModelError(f"{where}: {what} has a negative dim {list(dims)}")
    if math.prod(dims) > MAX_FOLD_ELEMENTS:
        raise ModelError(f"{where}: {what} of shape {list(dims)} is too large to compute at import time "
                         f"(over {MAX_FOLD_ELEMENTS} elements)")
    return dims


def reshape_target(where: str, shape_in: Sequence[int], spec: Any, allowzero: int) -> list[int]:
    """Reshape's output shape: 0 copies the input's dim (unless ``allowzero``), one -1 is inferred."""
    out = int_list(where, spec, "shape")
    for i, d in enumerate(out):
        if d == 0 and not allowzero:
            if i >= len(shape_in):
                raise ModelError(f"{where}: shape {out} copies dim {i} of a rank-{len(shape_in)} input")
            out[i] = int(shape_in[i])
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise ModelError(f"{where}: shape {out} has more than one -1 or a negative dim")
    total = math.prod(int(d) for d in shape_in)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise ModelError(f"{where}: cannot reshape {list(shape_in)} to {out}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise ModelError(f"{where}: cannot reshape {list(shape_in)} ({total} elements) to {out}")
    return out


def unsqueeze_shape(where: str, shape: Sequence[int], axes: Sequence[int]) -> list[int]:
    rank = len(shape) + len(axes)
    where_ones = set(axes_of(where, axes, rank))
    it = iter(shape)
    return [1 if i in where_ones else next(it) for i in range(rank)]


def squeeze_shape(where: str, shape: Sequence[int], axes: Sequence[int] | None) -> list[int]:
    if axes is None:
        return [d for d in shape if d != 1]
    drop = set(axes_of(where, axes, len(shape)))
    if any(shape[a] != 1 for a in drop):
        raise ModelError(f"{where}: axes {list(axes)} of {list(shape)} are not all of size 1")
    return [d for i, d in enumerate(shape) if i not in drop]


def same_rank_concat(where: str, shapes: Sequence[Sequence[int]], axis: Any) -> int:
    """The concat axis (normalised) after checking every part has one rank and equal other dims."""
    if not shapes:
        raise ModelError(f"{where}: nothing to concatenate")
    rank = len(shapes[0])
    index = axis_of(where, axis, rank)
    for s in shapes:
        differ = any(int(a) != int(b) for i, (a, b) in enumerate(zip(s, shapes[0])) if i != index)
        if len(s) != rank or differ:
            raise ModelError(f"{where}: parts of shapes {[list(p) for p in shapes]} do not concatenate on "
                             f"axis {axis}")
    return index


def indices_in_range(where: str, indices: np.ndarray, size: int) -> np.ndarray:
    """Integer indices in [-size, size), negative ones wrapped."""
    if indices.size and indices.dtype.kind not in "iu":
        raise ModelError(f"{where}: indices of type {indices.dtype}")
    idx = indices.astype(np.int64)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise ModelError(f"{where}: indices [{idx.min()}, {idx.max()}] out of range for an axis of {size}")
    return np.where(idx < 0, idx + size, idx)


def not_bool(where: str, op_type: str, *values: Any) -> None:
    if any(np.asarray(v).dtype == np.bool_ for v in values):
        raise ModelError(f"{where}: {op_type} of a bool tensor")


def gather_elements_index(where: str, data_shape: tuple, idx_shape: tuple, axis: Any) -> int:
    """GatherElements' axis after checking indices have the data's rank and fit its other dims."""
    index = axis_of(where, axis, len(data_shape))
    if len(idx_shape) != len(data_shape) or any(i > d for a, (i, d) in enumerate(zip(idx_shape, data_shape))
                                                if a != index):
        raise ModelError(f"{where}: indices of shape {list(idx_shape)} do not fit data of shape "
                         f"{list(data_shape)}")
    return index

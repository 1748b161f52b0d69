"""Shapes whose dims are ints or named symbols (``Sym("T")``), and bindings of symbols to sizes."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Sym:
    """A symbolic dimension; the same name in two shapes means the same runtime size."""

    name: str

    def __repr__(self) -> str:
        return self.name


Dim = int | Sym
Shape = tuple[Dim, ...]
DimBinding = Mapping[str, int]


def as_dim(value: Dim | str) -> Dim:
    if isinstance(value, Sym):
        return value
    if isinstance(value, str):
        return Sym(value)
    if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
        raise TypeError(f"a dim must be an int or a symbol name, got {value!r}")
    dim = int(value)
    if dim < 0:
        raise ValueError(f"negative dim {dim}")
    return dim


def as_shape(dims: Iterable[Dim | str]) -> Shape:
    return tuple(as_dim(d) for d in dims)


def is_static(shape: Shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def numel(shape: Shape) -> int:
    """Element count of a static shape (raises on a symbolic one)."""
    if not is_static(shape):
        raise ValueError(f"shape {format_shape(shape)} has symbolic dims")
    return math.prod(shape)  # type: ignore[arg-type]


def symbols(shape: Shape) -> set[str]:
    return {d.name for d in shape if isinstance(d, Sym)}


def bind(shape: Shape, binding: DimBinding) -> Shape:
    """Replace bound symbols by their sizes; unknown symbols stay symbolic."""
    return tuple(binding.get(d.name, d) if isinstance(d, Sym) else d for d in shape)


def format_shape(shape: Shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def broadcast_shapes(*shapes: Shape) -> Shape:
    """Numpy's right-aligned broadcasting, over ints and symbols; raises ValueError on a clash."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = {s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError("cannot broadcast " + " and ".join(format_shape(s) for s in shapes))
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0

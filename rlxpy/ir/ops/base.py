"""The op base class, tensor types, and the small enums ops use as attributes (no ops live here:
each op family has its own module, see ops/__init__.py).

An op is a frozen dataclass: its fields are the attributes. ``infer`` is the shape rule: it
gets the inputs' types and returns the output's type, raising GraphError (without the node's
name: Graph.add prefixes it) on bad input. Every subclass registers itself in ``OP_TYPES``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rlxpy.errors import GraphError, RegistryError
from rlxpy.ir.dtype import DType
from rlxpy.ir.shape import Shape, format_shape, normalize_axis

OP_TYPES: dict[str, type[Op]] = {}


@dataclass(frozen=True)
class TensorType:
    shape: Shape
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}{format_shape(self.shape)}"


class Op:
    """Base of every IR op. ``arity`` = (min inputs, max inputs or None for unbounded)."""

    arity: ClassVar[tuple[int, int | None]] = (1, 1)
    #: Ops that the unfuse pass expands; they never reach a backend.
    composite: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__name__
        if name in OP_TYPES and OP_TYPES[name] is not cls:
            other = OP_TYPES[name].__module__
            raise RegistryError(f"op {name} declared twice: in {other} and {cls.__module__}")
        OP_TYPES[name] = cls

    def infer(self, ins: Sequence[TensorType]) -> TensorType:  # pragma: no cover - abstract
        raise NotImplementedError

    def attrs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def check_arity(self, count: int) -> None:
        low, high = self.arity
        if count < low or (high is not None and count > high):
            want = f"{low}" if low == high else f"{low}..{high if high is not None else 'n'}"
            raise GraphError(f"takes {want} inputs, got {count}")


def same_type(ins: Sequence[TensorType], what: str = "inputs") -> None:
    """Raise unless all inputs have one dtype."""
    dtypes = {t.dtype for t in ins}
    if len(dtypes) > 1:
        raise GraphError(f"{what} must share a dtype, got " + ", ".join(str(t) for t in ins))


def need(condition: bool, message: str) -> None:
    """Shape-rule check: raise GraphError(message) when ``condition`` is false."""
    if not condition:
        raise GraphError(message)


class ActKind(enum.IntEnum):
    """Element-wise activations; the values are the serialised ids."""

    RELU = 0
    SIGMOID = 1
    TANH = 2
    EXP = 3
    LOG = 4
    SQRT = 5
    RSQRT = 6
    NEG = 7
    ABS = 8
    GELU = 9  # exact erf GELU, as torch.nn.functional.gelu(approximate="none")
    SILU = 10
    GELU_APPROX = 11  # tanh approximation, as torch's approximate="tanh"
    ROUND = 12  # half away from zero
    SIN = 13
    COS = 14
    TAN = 15
    ATAN = 16


class BinaryOp(enum.IntEnum):
    ADD = 0
    SUB = 1
    MUL = 2
    DIV = 3
    MAX = 4
    MIN = 5
    POW = 6


class CmpOp(enum.IntEnum):
    EQ = 0
    NE = 1
    LT = 2
    LE = 3
    GT = 4
    GE = 5


class ReduceOp(enum.IntEnum):
    SUM = 0
    MEAN = 1
    MAX = 2
    MIN = 3
    PROD = 4


class MaskKind(enum.IntEnum):
    NONE = 0
    CAUSAL = 1  # bottom-right aligned: query i sits at absolute position S_k - S_q + i
    CUSTOM = 2  # binary keep-mask: entry < 0.5 masks the score
    SLIDING_WINDOW = 3  # causal and at most `window` keys back
    BIAS = 4  # additive bias on the scaled scores


class FftNorm(enum.IntEnum):
    BACKWARD = 0  # no scaling either way
    FORWARD = 1  # inverse scaled by 1/N (numpy's norm="backward")
    ORTHO = 2


ENUMS: dict[str, type[enum.IntEnum]] = {
    e.__name__: e for e in (ActKind, BinaryOp, CmpOp, ReduceOp, MaskKind, FftNorm)
}


def enum_value(kind: type[enum.IntEnum], value: object) -> enum.IntEnum:
    """``kind[value]`` by member or case-insensitive name; GraphError listing the valid names."""
    if isinstance(value, kind):
        return value
    try:
        return kind[str(value).upper()]
    except KeyError:
        names = ", ".join(m.name.lower() for m in kind)
        raise GraphError(f"unknown {kind.__name__} {value!r}; expected one of: {names}") from None


def _axis(axis: int, rank: int) -> int:
    try:
        return normalize_axis(axis, rank)
    except ValueError as e:
        raise GraphError(str(e)) from None


def _static(shape: Sequence, what: str) -> None:
    need(all(isinstance(d, int) for d in shape), f"{what} needs static dims, got {list(shape)}")

"""The op base class, tensor types, and the small enums ops use as attributes (no ops live here:
each op family has its own module, see ops/__init__.py).

An op is a frozen dataclass: its fields are the attributes. ``infer`` is the shape rule: it
gets the inputs' types and returns the output's type, raising GraphError (without the node's
name: Graph.apply prefixes it) on bad input. Every subclass registers itself in ``OP_TYPES``.

Documented in docs/ops.md#base (generated from these docstrings by rlxpy/ir/ops_doc.py).
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
    """The type of a node's value: ``shape``, a tuple of dims (each an int, or a ``Sym`` bound when
    the graph compiles for concrete sizes), and ``dtype``. ``rank`` is ``len(shape)``; ``str`` gives
    ``f32[4, T]``. Shape rules take and return TensorTypes."""

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

    def mutated_inputs(self) -> tuple[int, ...]:
        """Indices of the inputs the op updates in place besides computing its output (a KV cache
        append, a carried recurrent state): the reference mutates exactly these arrays, and a
        backend writes them back (host steps) or checks its kernels write them."""
        return ()

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
    """Activation's function, on float inputs, computed in f64 and rounded once to the input dtype:

    - RELU max(x, 0); SIGMOID 1 / (1 + exp(-x)) (saturating to 0 and 1, no overflow); TANH; SILU
      x * sigmoid(x); GELU the exact erf form 0.5 x (1 + erf(x / sqrt 2)) (torch's
      ``approximate="none"``); GELU_APPROX 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
      (torch's ``approximate="tanh"``).
    - EXP (overflow -> +inf); LOG (log 0 = -inf, negative -> NaN); SQRT (negative -> NaN); RSQRT
      1 / sqrt(x) (0 -> +inf, negative -> NaN).
    - NEG, ABS; ROUND half away from zero (C's round(), not torch.round's half-to-even).
    - SIN, COS, TAN, ATAN (radians).
    - HARDSIGMOID min(max(x + 3, 0), 6) / 6 and HARDSWISH x min(max(x + 3, 0), 6) / 6, in that order
      (torch's; HARDSWISH(-inf) is NaN, as there).

    NaN in gives NaN out for every function (RELU included). The values are the serialised ids."""

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
    HARDSIGMOID = 17
    HARDSWISH = 18


class BinaryOp(enum.IntEnum):
    """Binary's operator. Both operands are converted to the promoted dtype (``dtype.promote``), then:

    - ADD, SUB, MUL: IEEE arithmetic on floats; integers wrap on overflow (two's complement, like
      numpy and torch).
    - DIV: IEEE division on floats (x / 0 = +-inf, 0 / 0 = NaN); on integers the quotient truncated
      toward zero (torch.div(rounding_mode="trunc")), exact for i64, and x / 0 = x.
    - MAX, MIN: element-wise; a NaN operand gives NaN (torch.maximum, not fmax).
    - POW: IEEE pow on floats (see Binary: a negative base with an integral exponent is real,
      (-inf) ** 0.5 = +inf). Integers: a non-negative exponent wraps on overflow; a negative one is
      computed in f64 and converted back truncating toward zero (2 ** -1 = 0; 0 to a negative
      power is undefined).

    The values are the serialised ids."""

    ADD = 0
    SUB = 1
    MUL = 2
    DIV = 3
    MAX = 4
    MIN = 5
    POW = 6


class CmpOp(enum.IntEnum):
    """Compare's operator: ==, !=, <, <=, >, >= on the operands after numpy's type promotion; the
    result is bool. Every comparison with a NaN operand is false, except NE, which is true. The
    values are the serialised ids."""

    EQ = 0
    NE = 1
    LT = 2
    LE = 3
    GT = 4
    GE = 5


class ReduceOp(enum.IntEnum):
    """How Reduce (and Pool) combine elements. Float inputs accumulate in f64 and are rounded once
    to the input dtype; integer inputs accumulate in i64 (u64 for unsigned) and wrap to the input dtype.

    - SUM, PROD: empty -> 0 and 1.
    - MEAN: the sum divided by the element count; an integer mean truncates toward zero; empty -> NaN
      for floats.
    - MAX, MIN: a NaN anywhere gives NaN (like torch.amax); an empty reduction is an error.

    The values are the serialised ids."""

    SUM = 0
    MEAN = 1
    MAX = 2
    MIN = 3
    PROD = 4


class MaskKind(enum.IntEnum):
    """Attention's mask (see Attention for where it applies: after scaling and softcap).

    - NONE: every query sees every key.
    - CAUSAL: bottom-right aligned: query i sits at absolute position p = S_k - S_q + i and sees
      keys 0..p (torch's ``is_causal`` when S_q == S_k; llama.cpp's KV-cache decode otherwise).
    - CUSTOM: a binary keep-mask input ([B, S_k], [B, S_q, S_k] or [B, H, S_q, S_k], broadcast to
      the scores); an entry < 0.5 masks its score (NaN entries keep it).
    - SLIDING_WINDOW: causal, and at most ``window`` keys back: keys p - window .. p.
    - BIAS: an additive input (same shapes as CUSTOM) added to the scaled scores.

    A masked score is a large finite negative (-3.4e38 causal, -1e9 custom), so a fully masked
    row averages V uniformly instead of producing NaN. The values are the serialised ids."""

    NONE = 0
    CAUSAL = 1  # bottom-right aligned: query i sits at absolute position S_k - S_q + i
    CUSTOM = 2  # binary keep-mask: entry < 0.5 masks the score
    SLIDING_WINDOW = 3  # causal and at most `window` keys back
    BIAS = 4  # additive bias on the scaled scores


class FftNorm(enum.IntEnum):
    """Fft's scaling, for length N: BACKWARD scales neither direction; FORWARD scales only the
    inverse by 1/N (numpy's ``norm="backward"``, so ifft(fft(x)) = x); ORTHO scales both by
    1/sqrt(N). The values are the serialised ids."""

    BACKWARD = 0  # no scaling either way
    FORWARD = 1  # inverse scaled by 1/N (numpy's norm="backward")
    ORTHO = 2


class ResizeMode(enum.IntEnum):
    """Resize's sampling, from the source coordinate ``src`` of an output position (ResizeCoord):

    - NEAREST_FLOOR / NEAREST_CEIL: floor(src) / ceil(src) (torch's "nearest" is NEAREST_FLOOR
      with ASYMMETRIC coordinates).
    - NEAREST_ROUND_PREFER_FLOOR / NEAREST_ROUND_PREFER_CEIL: the nearest index, a tie going down
      (ceil(src - 0.5), ONNX's default) / up (floor(src + 0.5); torch's "nearest-exact" with
      HALF_PIXEL coordinates). Every nearest index is clamped into [0, in - 1].
    - LINEAR: with s = max(src, 0), neighbours i0 = min(floor(s), in - 1) and i1 = min(i0 + 1,
      in - 1) weighted 1 - f and f, f = min(s - i0, 1) (torch's rule; past the last pixel it clamps),
      one dim after the other (bilinear, trilinear). Every neighbour is multiplied by its weight, so
      a NaN (or an inf at weight 0) neighbour gives NaN, as in torch.

    The values are the serialised ids."""

    NEAREST_FLOOR = 0
    NEAREST_CEIL = 1
    NEAREST_ROUND_PREFER_FLOOR = 2
    NEAREST_ROUND_PREFER_CEIL = 3
    LINEAR = 4


class ResizeCoord(enum.IntEnum):
    """Where Resize samples output index o of a dim resized from ``in`` to ``out`` elements, with
    ``step`` input units per output unit (the op's ``steps``, or in/out), computed in f32:

    - ASYMMETRIC: ``o * step``.
    - HALF_PIXEL: ``(o + 0.5) * step - 0.5`` (pixel centres line up).
    - PYTORCH_HALF_PIXEL: HALF_PIXEL, but 0 when out = 1 (ONNX's name: torch's own
      align_corners=False is HALF_PIXEL).
    - ALIGN_CORNERS: ``o * ((in - 1) / (out - 1))``, 0 when out = 1 (the first and last pixels line
      up; ``steps`` is ignored).

    The values are the serialised ids."""

    ASYMMETRIC = 0
    HALF_PIXEL = 1
    PYTORCH_HALF_PIXEL = 2
    ALIGN_CORNERS = 3


ENUMS: dict[str, type[enum.IntEnum]] = {
    e.__name__: e for e in (ActKind, BinaryOp, CmpOp, ReduceOp, MaskKind, FftNorm, ResizeMode, ResizeCoord)
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


def check_axis(axis: int, rank: int) -> int:
    """``axis`` normalised into [0, rank) (negative counts from the end); GraphError if out of range."""
    try:
        return normalize_axis(axis, rank)
    except ValueError as e:
        raise GraphError(str(e)) from None


def need_static(shape: Sequence, what: str) -> None:
    """Shape-rule check: GraphError unless every dim of ``shape`` is an int (no Sym)."""
    need(all(isinstance(d, int) for d in shape), f"{what} needs static dims, got {list(shape)}")

"""Fused element-wise regions.

A region evaluates a chain of element-wise steps per output element. Each step is the same
computation as the standalone op it names (Activation, Cast, Binary, Compare, Where), so a region
equals the unfused sequence of ops exactly. Operands are external inputs or earlier steps'
results; the output is the last step's result.

Chain encoding: each step is four u32 words ``[kind, sub, lhs, rhs]``: ``kind`` a ChainKind,
``sub`` the activation / dtype / binary / compare id (the tables below), and each operand word an
input index, or an earlier step's index with bit 31 set.

Read rule: input i is read at the output element's flat index e, except a scalar input (bit i of
the scalar mask) always at 0, an input with a modulus m > 0 at e % m, and the 2x-nearest-resize
prologue input at the half-resolution pixel under e (NCHW).

Documented in docs/ops.md#region (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlxpy.errors import GraphError
from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import ENUMS, ActKind, BinaryOp, CmpOp, Op, TensorType, need
from rlxpy.ir.ops.elementwise import Activation, Binary, Cast, Compare, Where
from rlxpy.ir.shape import Shape, format_shape, is_static

MAX_REGION_INPUTS = 16
MAX_CHAIN_STEPS = 32


class ChainKind(enum.IntEnum):
    """What one chain step computes, as the standalone op of that name: ACTIVATION (one operand,
    ``sub`` an ActKind), CAST (one operand, ``sub`` the target DType), BINARY (two, ``sub`` a
    BinaryOp), COMPARE (two, ``sub`` a CmpOp) and WHERE (three: cond, on_true, on_false). The
    values are the ``kind`` word of the chain encoding."""

    ACTIVATION = 0
    CAST = 1
    BINARY = 2
    COMPARE = 3
    WHERE = 4


class RegionPrologue(enum.IntEnum):
    """How a region reads its prologue input: NONE (no prologue, every input follows the read rule)
    or RESIZE_NEAREST_2X (the output is NCHW and the prologue input, at half its height and width, is
    read at (n, c, h // 2, w // 2): a nearest-neighbour 2x upsample fused into the chain)."""

    NONE = 0
    RESIZE_NEAREST_2X = 1  # NCHW output; the prologue input is read at (n, c, h//2, w//2)


ENUMS[ChainKind.__name__] = ChainKind  # so JSON graphs can name them
ENUMS[RegionPrologue.__name__] = RegionPrologue

#: Region-kernel activation sub-ids: a fixed order of their own (serialised chains), not ActKind's.
REGION_ACTIVATION_IDS = {
    ActKind.GELU: 0, ActKind.GELU_APPROX: 1, ActKind.SILU: 2, ActKind.RELU: 3, ActKind.SIGMOID: 4,
    ActKind.TANH: 5, ActKind.EXP: 6, ActKind.LOG: 7, ActKind.SQRT: 8, ActKind.RSQRT: 9, ActKind.NEG: 10,
    ActKind.ABS: 11, ActKind.ROUND: 12, ActKind.SIN: 13, ActKind.COS: 14, ActKind.TAN: 15, ActKind.ATAN: 16,
    ActKind.HARDSIGMOID: 17, ActKind.HARDSWISH: 18,
}
#: Cast sub-ids: a fixed dtype order of their own (serialised chains).
REGION_DTYPE_IDS = {d: i for i, d in enumerate((
    DType.F32, DType.F16, DType.BF16, DType.F64, DType.I8, DType.I16, DType.I32, DType.I64, DType.U8,
    DType.U32, DType.BOOL, DType.C64))}
_SUB_TYPES: dict[ChainKind, Any] = {
    ChainKind.ACTIVATION: ActKind, ChainKind.CAST: DType, ChainKind.BINARY: BinaryOp,
    ChainKind.COMPARE: CmpOp, ChainKind.WHERE: type(None),
}
_OPERAND_COUNT = {ChainKind.ACTIVATION: 1, ChainKind.CAST: 1, ChainKind.BINARY: 2, ChainKind.COMPARE: 2,
                  ChainKind.WHERE: 3}
_STEP_BIT = 1 << 31


@dataclass(frozen=True, repr=False)
class ChainOperand:
    """An external input (``is_step`` False) or an earlier step's result."""

    is_step: bool
    index: int

    def word(self) -> int:
        """The operand word of the chain encoding: bit 31 marks a step result."""
        return (_STEP_BIT | self.index) if self.is_step else self.index

    def __repr__(self) -> str:
        return f"{'s' if self.is_step else 'in'}{self.index}"


def chain_input(index: int) -> ChainOperand:
    return ChainOperand(False, index)


def chain_step(index: int) -> ChainOperand:
    return ChainOperand(True, index)


@dataclass(frozen=True, repr=False)
class ChainStep:
    """One step: ``kind`` with its ``sub`` (ActKind / DType / BinaryOp / CmpOp / None for Where)
    applied to ``args`` (1, 1, 2, 2 or 3 operands; Where is (cond, on_true, on_false))."""

    kind: ChainKind
    sub: ActKind | DType | BinaryOp | CmpOp | None
    args: tuple[ChainOperand, ...]

    def __post_init__(self) -> None:
        # JSON round trips hand back plain tuples; rebuild the operands from them.
        args = tuple(a if isinstance(a, ChainOperand) else ChainOperand(bool(a[0]), int(a[1]))
                     for a in self.args)
        object.__setattr__(self, "args", args)

    @staticmethod
    def activation(fn: ActKind, x: ChainOperand) -> ChainStep:
        return ChainStep(ChainKind.ACTIVATION, fn, (x,))

    @staticmethod
    def cast(to: DType, x: ChainOperand) -> ChainStep:
        return ChainStep(ChainKind.CAST, to, (x,))

    @staticmethod
    def binary(op: BinaryOp, a: ChainOperand, b: ChainOperand) -> ChainStep:
        return ChainStep(ChainKind.BINARY, op, (a, b))

    @staticmethod
    def compare(op: CmpOp, a: ChainOperand, b: ChainOperand) -> ChainStep:
        return ChainStep(ChainKind.COMPARE, op, (a, b))

    @staticmethod
    def where(cond: ChainOperand, on_true: ChainOperand, on_false: ChainOperand) -> ChainStep:
        return ChainStep(ChainKind.WHERE, None, (cond, on_true, on_false))

    def as_op(self) -> Op:
        """The standalone op this step computes."""
        if self.kind is ChainKind.ACTIVATION:
            return Activation(self.sub)  # type: ignore[arg-type]
        if self.kind is ChainKind.CAST:
            return Cast(self.sub)  # type: ignore[arg-type]
        if self.kind is ChainKind.BINARY:
            return Binary(self.sub)  # type: ignore[arg-type]
        if self.kind is ChainKind.COMPARE:
            return Compare(self.sub)  # type: ignore[arg-type]
        return Where()

    def words(self) -> tuple[int, int, int, int]:
        """``[kind, sub, lhs, rhs]``: the four words a chain step is encoded as (see ``encode_chain``)."""
        w = [a.word() for a in self.args]
        if self.kind is ChainKind.WHERE:
            return (int(self.kind), w[0], w[1], w[2])
        if self.kind is ChainKind.ACTIVATION:
            sub = REGION_ACTIVATION_IDS[self.sub]  # type: ignore[index]
        elif self.kind is ChainKind.CAST:
            sub = REGION_DTYPE_IDS[self.sub]  # type: ignore[index]
        else:
            sub = int(self.sub)  # type: ignore[arg-type]
        return (int(self.kind), sub, w[0], w[1] if len(w) > 1 else 0)

    def __repr__(self) -> str:
        sub = "" if self.sub is None else f" {self.sub.name.lower()}"
        return f"{self.kind.name.lower()}{sub}({', '.join(map(repr, self.args))})"


def encode_chain(chain: Sequence[ChainStep]) -> tuple[int, ...]:
    """The flat 4-words-per-step chain encoding (module docstring; without the prologue tail words)."""
    return tuple(word for step in chain for word in step.words())


def _coerce_chain(chain: Sequence[Any]) -> tuple[ChainStep, ...]:
    return tuple(ChainStep(*s) if isinstance(s, (tuple, list)) else s for s in chain)


def chain_dtype(chain: Sequence[ChainStep], input_dtypes: Sequence[DType]) -> DType:
    """Check the chain's wiring and types; return the dtype of its result (the last step)."""
    need(1 <= len(chain) <= MAX_CHAIN_STEPS, f"a chain has 1..{MAX_CHAIN_STEPS} steps, got {len(chain)}")
    results: list[DType] = []
    for j, step in enumerate(chain):
        need(isinstance(step, ChainStep) and isinstance(step.kind, ChainKind),
             f"chain step {j} is not a ChainStep: {step!r}")
        kind = step.kind.name
        need(isinstance(step.sub, _SUB_TYPES[step.kind]), f"chain step {j} {kind}: bad sub {step.sub!r}")
        need(len(step.args) == _OPERAND_COUNT[step.kind],
             f"chain step {j} {kind} takes {_OPERAND_COUNT[step.kind]} operands, got {len(step.args)}")
        types = []
        for a in step.args:
            pool, what = (results, "earlier step") if a.is_step else (input_dtypes, "input")
            need(0 <= a.index < len(pool), f"chain step {j} reads {a}, which is not an {what}")
            types.append(TensorType((1,), pool[a.index]))
        try:
            results.append(step.as_op().infer(types).dtype)
        except GraphError as e:
            raise GraphError(f"chain step {j} ({step}): {e}") from None
    return results[-1]


def _numel(shape: Shape) -> int | None:
    return math.prod(shape) if is_static(shape) else None  # type: ignore[arg-type]


def _half_resolution(out_shape: Shape) -> Shape:
    """The prologue input's shape [N, C, H/2, W/2] for an NCHW output with even H and W."""
    even = len(out_shape) == 4 and is_static(out_shape) and all(d % 2 == 0 for d in out_shape[2:])  # type: ignore[operator]
    need(even, f"resize prologue needs a static NCHW output with even H, W, got {format_shape(out_shape)}")
    n, c, h, w = out_shape
    return (n, c, h // 2, w // 2)  # type: ignore[operator]


def check_region_inputs(ins: Sequence[TensorType], out_shape: Shape, scalar_mask: int, modulus: Sequence[int],
                        prologue: RegionPrologue, prologue_input: int, rule_index: Any = None) -> None:
    """Apply the read rule (module docstring) to each input: prologue input, scalar, modulus, or full size.
    ``rule_index(i)`` picks whose mask bit / modulus applies (the batch region uses input 0's)."""
    pick = rule_index or (lambda i: i)
    out_numel = _numel(out_shape)
    for i, t in enumerate(ins):
        rule = pick(i)
        numel = _numel(t.shape)
        if prologue is RegionPrologue.RESIZE_NEAREST_2X and rule == prologue_input:
            want = _half_resolution(out_shape)
            need(tuple(t.shape) == want, f"prologue input {i} must be {format_shape(want)}, got {t}")
        elif scalar_mask >> rule & 1:
            need(numel == 1, f"input {i} is marked scalar but is {t}")
        elif rule < len(modulus) and modulus[rule]:
            need(numel == modulus[rule], f"input {i} {t} must hold input_modulus={modulus[rule]} elements")
        elif out_numel is not None and numel is not None:
            need(numel == out_numel, f"input {i} {t} must have the output's {out_numel} elements")
        else:
            need(tuple(t.shape) == tuple(out_shape),
                 f"input {i} {t} must match the output {format_shape(out_shape)}")


def _check_region_attrs(n_inputs: int, scalar_mask: int, modulus: Sequence[int], prologue: RegionPrologue,
                        prologue_input: int) -> None:
    need(scalar_mask >= 0 and scalar_mask >> n_inputs == 0,
         f"scalar_input_mask {scalar_mask:#x} names inputs beyond the {n_inputs} given")
    need(len(modulus) <= n_inputs and all(m >= 0 for m in modulus),
         f"input_modulus {tuple(modulus)} needs at most {n_inputs} entries >= 0")
    need(isinstance(prologue, RegionPrologue), f"unknown prologue {prologue!r}")
    need(prologue is RegionPrologue.NONE or 0 <= prologue_input < n_inputs,
         f"prologue_input {prologue_input} is not an input")


@dataclass(frozen=True)
class ElementwiseRegion(Op):
    """A fused element-wise chain over up to 16 inputs, producing the declared ``shape``.

    Input i is read per output element (flat index e) as: the prologue input at
    ``(n, c, h//2, w//2)`` (nearest 2x upsampling of NCHW, like torch's interpolate
    mode="nearest", scale 2); element 0 if bit i of ``scalar_input_mask`` is set;
    ``in[e % input_modulus[i]]`` if that entry is non-zero; else ``in[e]``. Each step is its
    standalone op (GELU exact erf, Round half away from zero, Cast truncating and saturating)."""

    chain: tuple[ChainStep, ...]
    shape: Shape
    scalar_input_mask: int = 0
    input_modulus: tuple[int, ...] = ()
    prologue: RegionPrologue = RegionPrologue.NONE
    prologue_input: int = 0
    arity = (1, MAX_REGION_INPUTS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chain", _coerce_chain(self.chain))

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _check_region_attrs(len(ins), self.scalar_input_mask, self.input_modulus, self.prologue,
                            self.prologue_input)
        check_region_inputs(ins, self.shape, self.scalar_input_mask, self.input_modulus, self.prologue,
                            self.prologue_input)
        return TensorType(tuple(self.shape), chain_dtype(self.chain, [t.dtype for t in ins]))


@dataclass(frozen=True)
class BatchElementwiseRegion(Op):
    """The same chain applied to each of n slice tensors (one shape and dtype), the results packed
    along the outer axis of the declared ``shape`` (slice i = flat elements [i*m, (i+1)*m),
    m = numel/n). Within slice i every ``Input(k)`` operand reads slice tensor i, with input 0's
    scalar bit, modulus and prologue; with the prologue the slice output is
    ``[shape[0]/n, C, H, W]``."""

    chain: tuple[ChainStep, ...]
    shape: Shape
    scalar_input_mask: int = 0
    input_modulus: tuple[int, ...] = ()
    prologue: RegionPrologue = RegionPrologue.NONE
    prologue_input: int = 0
    arity = (1, None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chain", _coerce_chain(self.chain))

    def slice_shape(self, count: int) -> Shape:
        """The output shape of one slice's region."""
        if self.prologue is RegionPrologue.RESIZE_NEAREST_2X:
            return (self.shape[0] // count,) + tuple(self.shape[1:])  # type: ignore[operator]
        return (_numel(self.shape) // count,)  # type: ignore[operator]

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        first = ins[0]
        need(all(t == first for t in ins),
             "slices must share one shape and dtype: " + ", ".join(map(str, ins)))
        need(is_static(self.shape), f"batch region shape {format_shape(self.shape)} must be static")
        count = len(ins)
        need(_numel(self.shape) % count == 0,  # type: ignore[operator]
             f"output {format_shape(self.shape)} does not split into {count} equal slices")
        _check_region_attrs(1, self.scalar_input_mask, self.input_modulus, self.prologue, self.prologue_input)
        if self.prologue is RegionPrologue.RESIZE_NEAREST_2X:
            need(len(self.shape) == 4 and self.shape[0] % count == 0,  # type: ignore[operator]
                 f"resize prologue needs an NCHW output whose N splits into {count} slices")
        check_region_inputs([first], self.slice_shape(count), self.scalar_input_mask, self.input_modulus,
                            self.prologue, self.prologue_input, rule_index=lambda i: 0)
        dtype = chain_dtype(self.chain, [first.dtype] * MAX_REGION_INPUTS)
        return TensorType(tuple(self.shape), dtype)

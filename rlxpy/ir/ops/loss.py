"""Loss family: log-softmax, the fused softmax cross-entropy that training graphs end with, and the
count of targets in range that a mean cross-entropy divides by.

Both are computed max-shifted (``x - max`` before ``exp``), so logits of any magnitude give finite
losses; their gradients are the backward family's CrossEntropyBackward and, for LogSoftmax,
primitives (``dy - exp(y) * sum(dy)``, see rlxpy/ir/grad/loss.py).

Documented in docs/ops.md#loss (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, TensorType, check_axis, need

#: Integer dtypes a class-index (target) tensor may have.
TARGET_DTYPES = (DType.I32, DType.U32, DType.I64)


@dataclass(frozen=True)
class LogSoftmax(Op):
    """``x - max - log(sum(exp(x - max)))`` along ``axis``, like torch.log_softmax: a row holding
    NaN or +inf comes out all NaN, a row of -inf too; a single -inf among finite values gives -inf."""

    axis: int = -1

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (x,) = ins
        need(x.dtype.is_float and x.rank >= 1, f"log_softmax needs a float tensor of rank >= 1, got {x}")
        check_axis(self.axis, x.rank)
        return x


@dataclass(frozen=True)
class CrossEntropy(Op):
    """Per-row softmax cross-entropy: inputs logits [..., C] (classes on the last axis) and integer
    targets [...] (i32/u32/i64, the logits' leading shape); output [...] in the logits' dtype.

    ``loss = logsumexp(logits) - logits[target]``, with the log-sum-exp max-shifted as
    torch.nn.functional.cross_entropy(reduction="none") computes it. A target outside [0, C) (torch's
    ignore_index -100 among them) gives loss 0; torch's mean over the counted rows is the builder's
    ``cross_entropy(..., reduction="mean")``: the sum of these losses over the number of targets in
    range (TargetCount; NaN when there is none, like torch). NaN or +inf in a row's logits gives NaN."""

    arity = (2, 2)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        logits, targets = ins
        need(logits.dtype.is_float and logits.rank >= 1,
             f"cross_entropy needs float logits [..., C], got {logits}")
        need(targets.dtype in TARGET_DTYPES, f"targets must be i32/u32/i64 class indices, got {targets}")
        need(tuple(targets.shape) == tuple(logits.shape[:-1]),
             f"targets {targets} must have the logits' leading shape (logits {logits})")
        return TensorType(tuple(targets.shape), logits.dtype)


@dataclass(frozen=True)
class TargetCount(Op):
    """The number of integer targets (i32/u32/i64, any shape) in [0, ``classes``), as a scalar of
    ``dtype``: the divisor of a mean cross-entropy that ignores out-of-range targets."""

    classes: int
    dtype: DType = DType.F32

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        (targets,) = ins
        need(targets.dtype in TARGET_DTYPES, f"targets must be i32/u32/i64 class indices, got {targets}")
        need(self.classes >= 0 and self.dtype.is_float,
             f"classes {self.classes} must be >= 0 and dtype a float type, got {self.dtype}")
        return TensorType((), self.dtype)

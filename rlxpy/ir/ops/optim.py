"""Optim family: parameter updates that run as GPU steps inside a training graph, updating the
parameter and the optimizer state in place (``Op.mutated_inputs``), and the global-norm clipping factor
they share.

The update ops read ``hyper``, an f32[3] input the trainer writes before each run: (lr, t, apply), with
t the 1-based count of updates (bias corrections, SGD's first momentum step) and apply = 0 leaving the
parameter and state untouched (a micro-batch of gradient accumulation). An optional f32[1] ``scale``
input multiplies the gradient (GradClipScale's output). Their output is an f32[1] token (0): the
update is the side effect, done whenever a run computes every output.

Documented in docs/ops.md#optim (generated from these docstrings by rlxpy/ir/ops_doc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlxpy.ir.dtype import DType
from rlxpy.ir.ops.base import Op, TensorType, need

TOKEN = TensorType((1,), DType.F32)
HYPER_SIZE = 3


def _check_update(ins: Sequence[TensorType], state: int, what: str) -> None:
    param = ins[0]
    need(param.dtype is DType.F32, f"{what} updates f32 params, got {param}")
    for t in ins[1:2 + state]:
        need(t.shape == param.shape and t.dtype is DType.F32, f"grad and state must be {param}, got {t}")
    rest = ins[2 + state:]
    need(len(rest) in (1, 2), f"{what} takes param, grad, {state} state tensors, hyper and an optional scale")
    need(rest[0].shape == (HYPER_SIZE,) and rest[0].dtype is DType.F32,
         f"hyper must be f32[{HYPER_SIZE}] (lr, t, apply), got {rest[0]}")
    if len(rest) == 2:
        need(rest[1].shape == (1,) and rest[1].dtype is DType.F32, f"scale must be f32[1], got {rest[1]}")


@dataclass(frozen=True)
class SgdStep(Op):
    """torch.optim.SGD's update of ``param`` in place; inputs param, grad, [momentum buffer when
    momentum != 0], hyper, [scale]. With g = scale * grad + weight_decay * param: the buffer becomes g
    at t = 1, else ``momentum * buf + (1 - dampening) * g``; the step is ``buf`` (``g + momentum *
    buf`` with nesterov); ``param -= lr * step``."""

    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    arity = (3, 5)

    @property
    def state(self) -> int:
        return int(self.momentum != 0.0)

    def mutated_inputs(self) -> tuple[int, ...]:
        return (0, 2) if self.state else (0,)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _check_update(ins, self.state, "sgd")
        need(not self.nesterov or (self.momentum > 0 and self.dampening == 0),
             "nesterov needs momentum > 0 and no dampening (as torch)")
        return TOKEN


@dataclass(frozen=True)
class AdamStep(Op):
    """torch.optim.Adam (``decoupled=False``) or AdamW (``decoupled=True``) updating ``param``, ``m`` and
    ``v`` in place; inputs param, grad, m, v, hyper, [scale]. With g = scale * grad (+ weight_decay *
    param for Adam): AdamW first scales ``param *= 1 - lr * weight_decay``; ``m += (1 - beta1)(g - m)``;
    ``v = beta2 v + (1 - beta2) g^2``; ``param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t)
    + eps)``."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False
    arity = (5, 6)

    def mutated_inputs(self) -> tuple[int, ...]:
        return (0, 2, 3)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        _check_update(ins, 2, "adam")
        need(0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0,
             f"betas ({self.beta1}, {self.beta2}) must be in [0, 1)")
        return TOKEN


@dataclass(frozen=True)
class AdamStepGroup(Op):
    """AdamStep (same attributes and semantics) over ``count`` parameters at once, so that one GPU
    dispatch serves several of them; inputs param_1, grad_1, m_1, v_1, ..., param_n, grad_n, m_n, v_n,
    hyper, [scale]. Each parameter's update is AdamStep's on its own four tensors."""

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False
    count: int = 1
    arity = (5, None)

    def mutated_inputs(self) -> tuple[int, ...]:
        return tuple(4 * i + k for i in range(self.count) for k in (0, 2, 3))

    def single(self) -> AdamStep:
        return AdamStep(self.beta1, self.beta2, self.eps, self.weight_decay, self.decoupled)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        need(self.count >= 1 and len(ins) in (4 * self.count + 1, 4 * self.count + 2),
             f"{self.count} parameters take {4 * self.count} tensors, hyper and an optional scale; got "
             f"{len(ins)} inputs")
        rest = list(ins[4 * self.count:])
        for i in range(self.count):
            self.single().infer(list(ins[4 * i:4 * i + 4]) + rest)
        return TOKEN


@dataclass(frozen=True)
class AccumulateGrad(Op):
    """Gradient accumulation over micro-batches: inputs acc (updated in place), grad, hyper;
    ``acc = 0`` when hyper's apply is set (the update consumed acc + grad), else ``acc += grad``."""

    arity = (3, 3)

    def mutated_inputs(self) -> tuple[int, ...]:
        return (0,)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        acc, grad, hyper = ins
        need(acc.dtype is DType.F32 and grad == acc,
             f"acc and grad must be one f32 type, got {acc} and {grad}")
        need(hyper.shape == (HYPER_SIZE,) and hyper.dtype is DType.F32,
             f"hyper must be f32[{HYPER_SIZE}], got {hyper}")
        return TOKEN


@dataclass(frozen=True)
class GradClipScale(Op):
    """The factor an update multiplies its gradient by: ``scale * min(1, max_norm / (n + 1e-6))`` with n
    the global L2 norm of ``scale`` times every input (torch.nn.utils.clip_grad_norm_'s clamped
    coefficient), or just ``scale`` when ``max_norm`` is 0. Inputs: the gradients (f32, any shapes);
    output f32[1]. ``scale`` averages accumulated micro-batches (1 / their count)."""

    max_norm: float = 0.0
    scale: float = 1.0
    arity = (1, None)

    def infer(self, ins: Sequence[TensorType]) -> TensorType:
        for t in ins:
            need(t.dtype is DType.F32, f"gradients must be f32, got {t}")
        need(self.max_norm >= 0.0, f"max_norm {self.max_norm} must be >= 0")
        return TOKEN

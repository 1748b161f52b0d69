"""Reference semantics of the optim family (float64 math, stored as f32): torch.optim.SGD and
Adam/AdamW updates in place, gradient accumulation, the global-norm clipping factor."""

from __future__ import annotations

import math

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference


def _hyper(args: list[np.ndarray], state: int) -> tuple[float, int, bool, float]:
    """(lr, t, apply, gradient scale) of an update op's trailing inputs."""
    hyper = args[2 + state].astype(np.float64)
    scale = float(args[3 + state][0]) if len(args) > 3 + state else 1.0
    return float(hyper[0]), int(round(float(hyper[1]))), bool(hyper[2] != 0.0), scale


def _token() -> np.ndarray:
    return np.zeros(1, np.float32)


@reference(ops.SgdStep)
def ref_sgd_step(op: ops.SgdStep, args, node):
    lr, t, apply, scale = _hyper(args, op.state)
    if not apply:
        return _token()
    param = args[0]
    p64 = param.astype(np.float64)
    g = args[1].astype(np.float64) * scale + op.weight_decay * p64
    if op.state:
        buf = args[2]
        new = g if t <= 1 else op.momentum * buf.astype(np.float64) + (1.0 - op.dampening) * g
        buf[...] = new
        g = g + op.momentum * new if op.nesterov else new
    param[...] = p64 - lr * g
    return _token()


@reference(ops.AdamStep)
def ref_adam_step(op: ops.AdamStep, args, node):
    lr, t, apply, scale = _hyper(args, 2)
    if not apply:
        return _token()
    param, m, v = args[0], args[2], args[3]
    p64 = param.astype(np.float64)
    g = args[1].astype(np.float64) * scale
    if op.decoupled:
        p64 = p64 * (1.0 - lr * op.weight_decay)
    elif op.weight_decay:
        g = g + op.weight_decay * p64
    m64 = m.astype(np.float64) + (1.0 - op.beta1) * (g - m.astype(np.float64))
    v64 = op.beta2 * v.astype(np.float64) + (1.0 - op.beta2) * g * g
    denom = np.sqrt(v64) / math.sqrt(1.0 - op.beta2 ** t) + op.eps
    param[...] = p64 - lr / (1.0 - op.beta1 ** t) * m64 / denom
    m[...], v[...] = m64, v64
    return _token()


@reference(ops.AdamStepGroup)
def ref_adam_step_group(op: ops.AdamStepGroup, args, node):
    rest = list(args[4 * op.count:])
    for i in range(op.count):
        ref_adam_step(op.single(), list(args[4 * i:4 * i + 4]) + rest, node)
    return _token()


@reference(ops.AccumulateGrad)
def ref_accumulate_grad(op: ops.AccumulateGrad, args, node):
    acc, grad, hyper = args
    acc[...] = 0.0 if hyper[2] != 0.0 else acc.astype(np.float64) + grad
    return _token()


@reference(ops.GradClipScale)
def ref_grad_clip_scale(op: ops.GradClipScale, args, node):
    if not op.max_norm:
        return np.full(1, op.scale, np.float32)
    norm = op.scale * math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in args))
    return np.full(1, op.scale * min(1.0, op.max_norm / (norm + 1e-6)), np.float32)

"""Reference semantics of the loss family: log-softmax and per-row softmax cross-entropy (float64)."""

from __future__ import annotations

import numpy as np

from rlxpy.ir import ops
from rlxpy.ir.reference.core import reference
from rlxpy.ir.shape import normalize_axis


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """Max-shifted log-softmax in float64 (NaN / +inf rows come out NaN, as torch's do)."""
    wide = x.astype(np.float64)
    with np.errstate(all="ignore"):
        shifted = wide - np.max(wide, axis=axis, keepdims=True)
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def target_rows(targets: np.ndarray, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(row class clipped into range, whether the target is in [0, classes)) for each row."""
    wide = targets.astype(np.int64)
    valid = (wide >= 0) & (wide < classes)
    return np.where(valid, wide, 0), valid


@reference(ops.LogSoftmax)
def ref_log_softmax(op: ops.LogSoftmax, args, node):
    (x,) = args
    return log_softmax(x, normalize_axis(op.axis, x.ndim)).astype(x.dtype)


@reference(ops.CrossEntropy)
def ref_cross_entropy(op: ops.CrossEntropy, args, node):
    logits, targets = args
    logp = log_softmax(logits, -1)
    rows, valid = target_rows(targets, logits.shape[-1])
    picked = np.take_along_axis(logp, rows[..., None], axis=-1)[..., 0]
    return np.where(valid, -picked, 0.0).astype(logits.dtype)


@reference(ops.TargetCount)
def ref_target_count(op: ops.TargetCount, args, node):
    (targets,) = args
    return np.asarray(target_rows(targets, op.classes)[1].sum(), dtype=node.dtype.numpy)

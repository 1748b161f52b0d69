"""Reverse-mode gradient rules (VJPs), one module per op family (named as in ``ir/ops``).

Each family module registers ``@vjp(ops.X)`` rules into the registry of ``core.py``; the traversal
that calls them is ``rlxpy/ir/passes/autodiff.py``. Importing this package imports every family
with rules, so the registry is complete. Families without rules: leaf (bound values), quant, kv,
sample, region, custom, backward (no second order), control (differentiated
through its unfused form) — a loss that depends on a differentiated tensor through one of their ops
is refused, naming the node.
"""

from __future__ import annotations

from rlxpy.ir.grad import (  # noqa: F401  (registration, in family order)
    attention,
    conv,
    elementwise,
    loss,
    matmul,
    norm,
    reduce,
    rope,
    scan,
    shape,
    signal,
)
from rlxpy.ir.grad.core import VJP, Grad, GradContext, Slice, VjpFn, differentiable, vjp, vjp_of

__all__ = ["VJP", "Grad", "GradContext", "Slice", "VjpFn", "differentiable", "vjp", "vjp_of"]
